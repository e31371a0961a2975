"""The `checksums` check: every file and every parameter matches its sha256 in the manifest."""

from __future__ import annotations

import jaxport.artifact
from jaxport.artifact import manifest as manifest_mod
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter.verify.results import CheckResult

_ARG = manifest_pb2.ArgumentRole


def check(art: jaxport.artifact.Artifact) -> CheckResult:
    """Hash every file and parameter (ChecksumError names the first that differs)."""
    m = art.manifest
    manifest_mod.verify_files(art.path, m)
    n_params = sum(a.role == _ARG.ARGUMENT_ROLE_PARAMETER for p in m.programs for a in p.arguments)
    return CheckResult("checksums", "pass", f"{len(m.files)} files, {n_params} parameters")
