"""Helpers shared by the bridge tests (goldens, repositories, expected RPC errors)."""

from __future__ import annotations

import shutil
from pathlib import Path

import grpc
import numpy as np
import pytest
from jaxport.artifact import goldens as goldens_io
from jaxport.artifact import manifest as manifest_io
from jaxport.protocol import dtypes
from support.bridge import EXPLICIT

__all__ = ["EXPLICIT", "golden_cases", "make_repository", "rpc_error"]


def make_repository(root: Path, artifacts: dict[str, Path], layout: dict[str, list[int]]
                    ) -> Path:
    """`root/<model>/<version>/` copies of the artifacts (`layout`: model -> versions)."""
    for name, versions in layout.items():
        for version in versions:
            shutil.copytree(artifacts[name], root / name / str(version))
    return root


def golden_cases(artifact: Path) -> list[tuple[str, dict[str, np.ndarray], dict[str, np.ndarray]]]:
    """(case name, inputs, expected outputs) of an artifact's goldens, dtypes from its manifest."""
    manifest = manifest_io.load(artifact)
    in_dt = {s.name: dtypes.by_datatype(s.dtype.datatype).numpy for s in manifest.inputs}
    out_dt = {s.name: dtypes.by_datatype(s.dtype.datatype).numpy for s in manifest.outputs}
    cases = []
    for case in manifest.goldens:
        # Manifest order (the golden maps are unordered).
        ins = {k: goldens_io.load_npy(artifact / case.inputs[k], in_dt[k])
               for k in in_dt if k in case.inputs}
        outs = {k: goldens_io.load_npy(artifact / case.outputs[k], out_dt[k])
                for k in out_dt if k in case.outputs}
        cases.append((case.name, ins, outs))
    return cases


def rpc_error(call, *args, **kwargs) -> grpc.RpcError:
    """The RpcError a call raises (fails the test if it succeeds)."""
    with pytest.raises(grpc.RpcError) as info:
        call(*args, **kwargs)
    return info.value
