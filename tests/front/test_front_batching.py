"""Dynamic batching in the front (package batch) for every model, whichever engine executes
it: a batch is formed in the front and executed once, natively or on a worker; statistics are
the front's count (no per-worker sum).

A first request finds the batcher idle and runs at once, alone; its execution is held at the
test gate while eight one-row requests (four unary, four streams) queue (the batcher's own
count, jaxport_batch_requests_total, says when all nine are in); released, the eight are ONE
execution of the 8-row program. The queue delay is one no test outlives: the batch is
dispatched when its rows reach the preferred size (8), never by a clock. On the workers
(--engine exported, two worker processes) as natively: a batch is one EXECUTE to one worker.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import numpy as np
import pytest
from front_helpers import FEATURES, NEVER_US, front_command, rows_model, rows_params, rows_request
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from support.bridge import BridgeProcess
from support.gate import Gate
from support.waiting import wait_until
from test_front import mlp_request, stub

WAIT_S = 120.0


@pytest.mark.parametrize("engine", [[], ["--engine", "exported", "--workers", "2"]],
                         ids=["native", "workers"])
def test_one_batch_of_eight_rows_in_the_front(front_binary: Path, batched_repo: Path,
                                              tmp_path: Path, engine: list[str]) -> None:
    args = ("--batching", "--max-queue-delay-us", str(NEVER_US), *engine)
    xs = [np.random.default_rng(i).standard_normal((1, FEATURES)).astype(np.float32)
          for i in range(9)]
    gate = Gate(tmp_path / "gate")
    with BridgeProcess(batched_repo, *args, env=gate.env, workdir=tmp_path / "front",
                       command=front_command(front_binary)) as front, ThreadPoolExecutor(9) as pool:
        s = stub(front)
        cfg = s.ModelConfig(pb.ModelConfigRequest(name="rows"), timeout=60).config
        assert cfg.parameters["engine"].string_value == ("exported" if engine else "native")
        assert list(cfg.dynamic_batching.preferred_batch_size) == [8]
        assert cfg.dynamic_batching.max_queue_delay_microseconds == NEVER_US

        def call(i: int) -> pb.ModelInferResponse:
            if i % 2:
                return s.ModelInfer(rows_request(xs[i], str(i)), timeout=WAIT_S)
            (out,) = list(s.ModelStreamInfer(iter([rows_request(xs[i], str(i))]),
                                             timeout=WAIT_S))
            assert not out.error_message
            return out.infer_response

        def queued() -> float:
            return front.metrics().get(
                ("jaxport_batch_requests_total", (("model", "rows"), ("version", "1"))), 0)

        with gate.holding("rows"):
            first = pool.submit(call, 0)
            gate.wait_held("rows", 1, calls=[first])  # it found the batcher idle: run at once
            rest = [pool.submit(call, i) for i in range(1, 9)]
            wait_until(lambda: queued() == 9, "nine requests in the batcher")
        outs = [first.result(timeout=WAIT_S)] + [f.result(timeout=WAIT_S) for f in rest]
        want = jax.jit(rows_model)(rows_params(), np.concatenate(xs))
        for i, out in enumerate(outs):
            assert out.id == str(i)
            np.testing.assert_allclose(
                np.frombuffer(out.raw_output_contents[0], np.float32).reshape(1, 3),
                np.asarray(want)[i:i + 1], rtol=1e-5, atol=1e-6)
        (stats,) = s.ModelStatistics(pb.ModelStatisticsRequest(name="rows"),
                                     timeout=60).model_stats
        assert (stats.inference_count, stats.execution_count) == (9, 2)
        assert [(b.batch_size, b.compute_infer.count) for b in stats.batch_stats] == [(1, 1),
                                                                                      (8, 1)]
        executions = {dict(ls)["batch_size"]: v for (name, ls), v in front.metrics().items()
                      if name == "jaxport_batch_executions_total"}
        assert executions == {"1": 1, "8": 1}


# workers_front: every model on two workers; the front counts each request once.
def test_model_statistics_are_the_fronts_count(workers_front: BridgeProcess) -> None:
    f = stub(workers_front)

    def stats() -> pb.ModelStatistics:
        (s,) = f.ModelStatistics(pb.ModelStatisticsRequest(name="mlp", version="1"),
                                 timeout=60).model_stats
        return s

    before = stats()
    for i in range(6):
        f.ModelInfer(mlp_request(np.ones((2, 8), np.float32), rid=str(i)), timeout=60)
    after = stats()
    assert after.inference_count - before.inference_count == 6
    assert after.execution_count - before.execution_count == 6
    assert after.inference_stats.success.count - before.inference_stats.success.count == 6
    assert after.last_inference >= before.last_inference
    assert (after.name, after.version) == ("mlp", "1")
