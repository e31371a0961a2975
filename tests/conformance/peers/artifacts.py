"""What both peer adapters share: the suite repository (`<repo>/<model>/<version>/`, jaxport
artifacts) opened with the public artifact API, `jaxport.artifact.open`, and each model's OIP
signature. Runs inside a peer's own venv (build/peers/<peer>/), never in the product."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from jaxport.artifact import open as open_artifact
from jaxport.artifact.manifest import numpy_dtype
from jaxport.protocol import dtypes


def load(repository: Path) -> dict[str, tuple[str, Any]]:
    """model name -> (version, artifact): the highest numeric version of each model."""
    out = {}
    for model_dir in sorted(p for p in repository.iterdir() if p.is_dir()):
        versions = sorted((v for v in model_dir.iterdir() if v.name.isdigit()),
                          key=lambda v: int(v.name))
        if versions:
            out[model_dir.name] = (versions[-1].name, open_artifact(versions[-1]))
    return out


def signature(specs: Any) -> list[dict[str, Any]]:
    """Manifest tensor specs as OIP metadata tensors (name, datatype, shape)."""
    return [{"name": s.name, "datatype": dtypes.by_numpy(numpy_dtype(s.dtype)).datatype,
             "shape": list(s.shape)} for s in specs]


def datatype(array: np.ndarray) -> str:
    """The OIP datatype of an output array."""
    return dtypes.by_numpy(array.dtype).datatype
