"""Calls the peer ends (issue 14): a stream torn down without closing (what every
`perf_analyzer --streaming` run does when it exits), a stream and a unary call cancelled while
their request executes. Each ends as CANCELLED in `jaxport_grpc_requests_total`, is logged at
INFO at most (no traceback), and the bridge keeps serving: with `mlp` on the front's native
engine (the default) and on the workers (`--pjrt-plugin none`)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from jaxport.protocol import codecs
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from support.bridge import BridgeProcess
from support.gate import Gate

STREAM = "/inference.GRPCInferenceService/ModelStreamInfer"
UNARY = "/inference.GRPCInferenceService/ModelInfer"
WAIT_S = 120.0

# A client that opens a stream, gets one answer and exits with the stream still open.
VANISHING_CLIENT = """
import os, sys, grpc, numpy as np
from jaxport.protocol import codecs
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
import threading
channel = grpc.insecure_channel(sys.argv[1])
never = threading.Event()
def requests():
    yield codecs.build_infer_request("mlp", {"x": np.ones((2, 8), np.float32)}, request_id="v")
    never.wait()
call = pb_grpc.GRPCInferenceServiceStub(channel).ModelStreamInfer(requests())
print(next(call).infer_response.id, flush=True)
os._exit(0)
"""


def _grpc_counts(bridge: BridgeProcess) -> dict[tuple[str, str], float]:
    """`jaxport_grpc_requests_total` by (method, code)."""
    return {(dict(labels)["method"], dict(labels)["code"]): value
            for (name, labels), value in bridge.metrics().items()
            if name == "jaxport_grpc_requests_total"}


def _wait_count(bridge: BridgeProcess, method: str, code: str, n: int) -> dict:
    """Wait (polling the metrics, bounded) until `n` calls of `method` ended with `code`."""
    end = time.monotonic() + WAIT_S
    while True:
        counts = _grpc_counts(bridge)
        if counts.get((method, code), 0) >= n:
            return counts
        assert time.monotonic() < end, f"{method} never counted {n} x {code}: {counts}"
        assert bridge.alive()


# The server's record of a cancellation it learned of while the call was held: the front's test
# gate, which holds every execution whichever engine runs it.
GONE = "test gate: the held execution's call ended; it will not run"


@pytest.fixture(scope="module", params=["native", "workers"])
def gated(request: pytest.FixtureRequest, repository: Path,
          tmp_path_factory: pytest.TempPathFactory):
    """`mlp` executed by the front's native engine (the default), and by the workers."""
    gate = Gate(tmp_path_factory.mktemp("cancel-gate"))
    engine = ["--pjrt-plugin", "none"] if request.param == "workers" else []
    with BridgeProcess(repository, "--log-level", "DEBUG", *engine, env=gate.env) as bridge:
        yield bridge, gate, request.param


def _gone(bridge: BridgeProcess) -> list[dict[str, object]]:
    """The server's records of a cancellation it was told of."""
    return [r for r in bridge.log_records() if r.get("msg") == GONE]


def _assert_quiet(bridge: BridgeProcess) -> None:
    """Nothing above INFO, no traceback: a caller leaving is no error of the server's."""
    loud = [r for r in bridge.log_records()
            if r.get("level") not in ("DEBUG", "INFO") or "traceback" in str(r).lower()]
    assert not loud, loud


def test_a_stream_whose_client_exits_ends_cancelled(gated):
    bridge, _, _ = gated
    proc = subprocess.run([sys.executable, "-c", VANISHING_CLIENT, bridge.address],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "v", proc.stdout + proc.stderr
    counts = _wait_count(bridge, STREAM, "CANCELLED", 1)
    assert not [k for k in counts if k[1] in ("INTERNAL", "UNKNOWN")], counts
    _assert_quiet(bridge)


def test_stream_and_unary_cancelled_while_executing_end_cancelled(gated):
    bridge, gate, _ = gated
    stub = pb_grpc.GRPCInferenceServiceStub(bridge.channel())
    before = _grpc_counts(bridge)
    request = codecs.build_infer_request("mlp", {"x": np.ones((2, 8), np.float32)})
    stop = threading.Event()

    def requests() -> Iterator:
        yield request
        stop.wait(WAIT_S)

    with gate.holding("mlp"):
        stream = stub.ModelStreamInfer(requests(), timeout=300)
        gate.wait_held("mlp", 1)
        unary = stub.ModelInfer.future(request, timeout=300)
        gate.wait_held("mlp", 2, calls=[unary])
        gone = len(_gone(bridge))
        assert unary.cancel()
        stream.cancel()
        # The hold is released only once the server knows both callers went away: on a
        # loaded machine the unary would otherwise pass the gate and answer before its
        # cancellation arrived (and rightly count OK).
        end = time.monotonic() + WAIT_S
        while len(_gone(bridge)) < gone + 2:
            assert time.monotonic() < end, "the server never heard of both cancellations"
            time.sleep(0.02)
        stop.set()
    _wait_count(bridge, STREAM, "CANCELLED", before.get((STREAM, "CANCELLED"), 0) + 1)
    counts = _wait_count(bridge, UNARY, "CANCELLED", before.get((UNARY, "CANCELLED"), 0) + 1)
    assert not [k for k in counts if k[1] in ("INTERNAL", "UNKNOWN")], counts
    _assert_quiet(bridge)
    answer = stub.ModelInfer(request, timeout=60)  # still serving
    assert codecs.decode_infer_response(answer)["output"].shape == (2, 4)
