"""`jaxport verify DIR`: the consumer-side proof that an artifact does what its manifest says.

Each check runs in a fresh `python -I` process (isolated: no current directory, no
PYTHONPATH), so the model's source cannot be imported; the worker reports whether the source
module is importable and fails if it was imported. Checks, one module each:

1. `checksums` - every file and every parameter matches its sha256 in the manifest;
2. `jaxexport`  - `jax.export.deserialize(model.jaxexport)` agrees with the manifest (argument
   order, kept leaves, shapes, dtypes) and `.call(params, *golden inputs)` equals the goldens;
3. `pjrt`       - the raw `model.mlirbc` compiled by the PJRT client (no jax.export) and run
   with arguments bound purely from the manifest order equals the goldens;
4. `pjrt-c-api` - no Python on the execution path: `jaxport-native-goldens` (the front's
   native engine through the PJRT C API, built by `make setup`) reads the weights, compiles
   every fixed-shape program and runs every golden case; its raw results equal the goldens
   (skipped, naming `make front` / `make pjrt-plugin`, when the program or the plugin is absent,
   and with the engine's reason for a model it does not run);
5. `iree`       - `iree-compile` + `iree-run-module` (C runtime CLI) with every argument in
   manifest order equals the goldens (skipped when IREE is not installed).

The other modules: `tolerances` (the rule: per-dtype atol/rtol, `--atol/--rtol`, the f32
reference rule for bf16/f16), `reference` (the float32 evaluation of a low-precision program),
`cases` (a program's golden cases, results compared, `find_tool` for the programs the
`iree` and `pjrt-c-api` checks run; arguments are bound from the manifest by
`jaxport.artifact.binding`), `results` (`CHECKS`, `CheckResult`, the table), `orchestration`
(the parent: platforms, one `python -I` process per check) and `worker` (one check inside that
process; `__main__` is its entry point, `python -I -m jaxport.exporter.verify --worker CHECK
DIR`).

Platforms: `jaxexport` and `pjrt` run on every platform the artifact lists that is present
here (`present_platforms`: what jax finds in a fresh process with the caller's environment,
JAX_PLATFORMS included), once per platform. IREE compiles for llvm-cpu, so it runs when the
artifact lists `cpu`. An artifact none of whose platforms is present cannot be executed here:
`run_checks` refuses it (one line naming the listed and the present platforms) unless
`allow_unexecuted=True`, which runs the checksums only.

Trust model: `jaxexport` deserializes the artifact; run verify only on artifacts you trust.
Checksums establish integrity, not authenticity.
"""

from __future__ import annotations

from jaxport.exporter.verify.cases import find_tool
from jaxport.exporter.verify.iree import iree_compile_command, not_run_on_iree
from jaxport.exporter.verify.orchestration import (
    manifest_warnings,
    present_platforms,
    run_checks,
)
from jaxport.exporter.verify.reference import f32_module_text, f32_reference
from jaxport.exporter.verify.results import (
    CHECKS,
    KNOWN_PLATFORMS,
    PLATFORM_CHECKS,
    CheckResult,
    format_table,
)
from jaxport.exporter.verify.tolerances import (
    EXACT,
    LOW_PRECISION,
    REFERENCE_ULPS,
    TOLERANCES,
    Comparison,
    compare,
    set_override,
    ulp,
)

__all__ = [
    "CHECKS",
    "EXACT",
    "KNOWN_PLATFORMS",
    "LOW_PRECISION",
    "PLATFORM_CHECKS",
    "REFERENCE_ULPS",
    "TOLERANCES",
    "CheckResult",
    "Comparison",
    "compare",
    "f32_module_text",
    "f32_reference",
    "find_tool",
    "format_table",
    "iree_compile_command",
    "manifest_warnings",
    "not_run_on_iree",
    "present_platforms",
    "run_checks",
    "set_override",
    "ulp",
]
