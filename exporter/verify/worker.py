"""One check inside its fresh `python -I` process (`python -I -m jaxport.exporter.verify
--worker CHECK DIR`, see `__main__`): open the artifact, run the check's module, fail it when
the model's own source module was imported, print the result as one JSON line."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict

import jaxport.artifact
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter.errors import ExportError
from jaxport.exporter.verify import checksums, iree, jaxexport, pjrt, pjrt_c_api
from jaxport.exporter.verify.results import CHECKS, KNOWN_PLATFORMS, PLATFORM_CHECKS, CheckResult
from jaxport.exporter.verify.tolerances import set_override

__all__ = ["main", "run"]


def _uses_x64(m: manifest_pb2.Manifest) -> bool:
    return any(
        a.dtype.itemsize == 8 for p in m.programs for a in [*p.arguments, *p.results]
    )


def run(check: str, artifact_dir: str, platform: str = "cpu") -> CheckResult:
    """Run `check` on the artifact in this process (on `platform` for a platform check)."""
    # Checksums are a check of their own: the others read the artifact without hashing it.
    art = jaxport.artifact.open(artifact_dir, verify_checksums=False)
    m = art.manifest
    source_module = m.source_function.split(":", 1)[0] if ":" in m.source_function else ""
    if _uses_x64(m):
        import jax

        jax.config.update("jax_enable_x64", True)
    if check in PLATFORM_CHECKS and m.nr_devices > 1:
        art.mesh()  # a sharded program's devices, before anything starts jax's backend
    if check in PLATFORM_CHECKS:
        result = {"jaxexport": jaxexport.check, "pjrt": pjrt.check}[check](art, platform)
    else:
        result = {"checksums": checksums.check, "iree": iree.check,
                  pjrt_c_api.NAME: pjrt_c_api.check}[check](art)
    if source_module and source_module in sys.modules:
        return CheckResult(check, "fail", f"the model's module {source_module!r} was imported")
    if source_module and importlib.util.find_spec(source_module.split(".")[0]) is None:
        result.detail += f"; model module {source_module!r} not importable here"
    return result


def main(argv: Sequence[str]) -> int:
    """The worker's command line; prints one JSON CheckResult (a failure included), exits 0."""
    parser = argparse.ArgumentParser(prog="jaxport verify worker", allow_abbrev=False)
    parser.add_argument("--worker", choices=CHECKS, required=True)
    parser.add_argument("artifact_dir")
    parser.add_argument("--atol", type=float)
    parser.add_argument("--rtol", type=float)
    parser.add_argument("--platform", default="cpu", choices=KNOWN_PLATFORMS)
    ns = parser.parse_args(argv)
    set_override(ns.atol, ns.rtol)
    try:
        result = run(ns.worker, ns.artifact_dir, ns.platform)
    except ExportError as exc:
        result = CheckResult(ns.worker, "fail", str(exc))
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        result = CheckResult(ns.worker, "fail", f"{type(exc).__name__}: {first}"[:500])
    print(json.dumps(asdict(result)))
    return 0
