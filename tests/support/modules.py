"""`load(name, path)`: a helper module loaded by its path under a name of its own. Suites share
generic module names (`models`, `run`), so `import models` would depend on which suite's
directory came first on sys.path; each loads once per process."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["load"]


def load(name: str, path: Path) -> ModuleType:
    """The module at `path`, registered as `name` (loaded on first use)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None, path
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]
