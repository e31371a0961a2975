"""The `checksums` check: every file and every parameter matches its sha256 in the manifest."""

from __future__ import annotations

import jaxport.artifact
from jaxport.artifact import binding
from jaxport.artifact import manifest as manifest_mod
from jaxport.exporter.verify.results import CheckResult


def check(art: jaxport.artifact.Artifact) -> CheckResult:
    """Hash every file and parameter (ChecksumError names the first that differs)."""
    m = art.manifest
    manifest_mod.verify_files(art.path, m)
    # Each parameter once: the programs of a batched or bucketed export share the weights.
    n_params = len({a.name for p in m.programs for a in binding.parameter_arguments(p)})
    return CheckResult("checksums", "pass", f"{len(m.files)} files, {n_params} parameters")
