"""jaxport exporter: JAX function + params -> fixed-shape StableHLO artifact (`jaxport export`).

`export` is imported lazily so that `jaxport.artifact.manifest` / `weights` (used by the
bridge and by verify workers) do not pay for tracing machinery they never use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["export"]


def __getattr__(name: str) -> Any:
    if name == "export":
        from jaxport.exporter.api import export

        return export
    raise AttributeError(f"module 'jaxport.exporter' has no attribute {name!r}")
