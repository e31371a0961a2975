"""Helpers for calling a live bridge from the reliability tests (raw grpc stubs)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import grpc
import numpy as np
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from rel_models import SLOW_N


def make_repository(root: Path, artifacts: dict[str, Path], names: list[str]) -> Path:
    """A fresh repository `root` holding a copy of each named artifact as version 1."""
    for name in names:
        shutil.copytree(artifacts[name], root / name / "1")
    return root


def stub(channel: grpc.Channel) -> pb_grpc.GRPCInferenceServiceStub:
    return pb_grpc.GRPCInferenceServiceStub(channel)


def wait_ready(s: pb_grpc.GRPCInferenceServiceStub, timeout: float = 120.0, **kw) -> None:
    """Block until ServerReady answers true."""
    end = time.monotonic() + timeout
    last: object = None
    while time.monotonic() < end:
        try:
            if s.ServerReady(pb.ServerReadyRequest(), timeout=2, **kw).ready:
                return
        except grpc.RpcError as exc:
            last = exc.code()
        time.sleep(0.1)
    raise TimeoutError(f"bridge not ready after {timeout}s (last: {last})")


def fuzzy_request(x: np.ndarray | None = None, flag: np.ndarray | None = None,
                  request_id: str = "") -> pb.ModelInferRequest:
    x = np.arange(6, dtype=np.float32).reshape(2, 3) if x is None else x
    flag = np.array([True, False]) if flag is None else flag
    req = pb.ModelInferRequest(model_name="fuzzy", id=request_id)
    req.inputs.add(name="x", datatype="FP32", shape=[2, 3])
    req.inputs.add(name="flag", datatype="BOOL", shape=[2])
    req.raw_input_contents.extend([x.astype("<f4").tobytes(), flag.astype(bool).tobytes()])
    return req


def slow_request(iters: int = 10, request_id: str = "") -> pb.ModelInferRequest:
    """A `slow` request running `iters` matmul rounds (to keep one running, hold it at the
    bridge's test gate: `support.gate`)."""
    req = pb.ModelInferRequest(model_name="slow", id=request_id)
    req.inputs.add(name="x", datatype="FP32", shape=[SLOW_N, SLOW_N])
    req.inputs.add(name="iters", datatype="INT32", shape=[])
    req.raw_input_contents.extend(
        [np.full((SLOW_N, SLOW_N), 0.01, "<f4").tobytes(), np.int32(iters).astype("<i4").tobytes()]
    )
    return req


def output(resp: pb.ModelInferResponse, name: str = "y") -> np.ndarray:
    for i, t in enumerate(resp.outputs):
        if t.name == name:
            dt = {"FP32": "<f4", "BOOL": "bool"}[t.datatype]
            return np.frombuffer(resp.raw_output_contents[i], dt).reshape(tuple(t.shape))
    raise KeyError(name)


def execution_count(s: pb_grpc.GRPCInferenceServiceStub, model: str, **kw) -> int:
    """Executions of `model` so far, from the ModelStatistics RPC."""
    st = s.ModelStatistics(pb.ModelStatisticsRequest(name=model), timeout=10, **kw)
    return sum(m.execution_count for m in st.model_stats)


def status_name(exc: grpc.RpcError) -> str:
    return exc.code().name


def admission_counts(bridge, model: str) -> dict[str, float]:
    """`jaxport_admission_total{model=MODEL,outcome=...}` from the bridge's /metrics (summed
    over its workers)."""
    counts = dict.fromkeys(("admitted", "shed", "expired", "cancelled"), 0.0)
    for (name, labels), value in bridge.metrics().items():
        fields = dict(labels)
        if name == "jaxport_admission_total" and fields.get("model") == model:
            counts[fields["outcome"]] = value
    return counts


def wait_admission(bridge, model: str, outcomes: tuple[str, ...], at_least: float,
                   timeout: float = 60.0) -> dict[str, float]:
    """Block until the bridge has counted `at_least` admission outcomes of `model` among
    `outcomes` (summed, since the start); the counts then.

    A caller whose deadline passes while it waits is counted `expired` or `cancelled`,
    whichever the bridge notices first (grpc ends the call at the deadline too), so tests
    about refused waiters wait for `("expired", "cancelled")`."""
    end = time.monotonic() + timeout
    while sum((counts := admission_counts(bridge, model))[o] for o in outcomes) < at_least:
        if time.monotonic() > end:
            raise TimeoutError(f"admission {outcomes} of {model!r}: {counts}, not {at_least:.0f}"
                               f" after {timeout:.0f} s")
        time.sleep(0.02)
    return counts


