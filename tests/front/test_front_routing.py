"""What the front answers from all its workers, and where it sends a batching model's requests
(bridge/front/stats.go, route.go):

* ModelStatistics sums every worker's statistics (each worker counts only what it executed);
* ModelReady is true only when every worker says so;
* requests of a model that batches all go to one worker, so its batches fill as in one
  `jaxport serve` (spread over two workers, each batcher would see half of them).
"""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import numpy as np
from front_helpers import FEATURES, NEVER_US, front_command, rows_model, rows_params, rows_request
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from support.bridge import BridgeProcess
from test_front import mlp_request, stub, wait_for, worker_ready_records

WAIT_S = 120.0


def test_batching_model_requests_fill_one_batch_across_two_workers(
        front_binary: Path, batched_repo: Path, tmp_path: Path) -> None:
    """Eight one-row requests (four unary, four streams) to a two-worker front are answered by
    ONE execution of the 8-row program: they all reached the same worker's batcher. Were they
    spread over the workers, neither batcher would reach 8 rows and, with a queue delay no test
    outlives, the calls would hang until their deadline."""
    args = ("--batching", "--max-queue-delay-us", str(NEVER_US), "--worker-threads", "32")
    xs = [np.random.default_rng(i).standard_normal((1, FEATURES)).astype(np.float32)
          for i in range(8)]
    with BridgeProcess(batched_repo, *args, workdir=tmp_path / "front",
                       command=front_command(front_binary, "--workers", "2")) as front:
        s = stub(front)

        def call(i: int) -> pb.ModelInferResponse:
            if i % 2:
                return s.ModelInfer(rows_request(xs[i], str(i)), timeout=WAIT_S)
            (out,) = list(s.ModelStreamInfer(iter([rows_request(xs[i], str(i))]),
                                             timeout=WAIT_S))
            assert not out.error_message
            return out.infer_response

        with ThreadPoolExecutor(8) as pool:
            outs = list(pool.map(call, range(8)))
        want = jax.jit(rows_model)(rows_params(), np.concatenate(xs))
        for i, out in enumerate(outs):
            assert out.id == str(i)
            np.testing.assert_allclose(
                np.frombuffer(out.raw_output_contents[0], np.float32).reshape(1, 3),
                np.asarray(want)[i:i + 1], rtol=1e-5, atol=1e-6)
        (stats,) = s.ModelStatistics(pb.ModelStatisticsRequest(name="rows"),
                                     timeout=60).model_stats
        assert (stats.inference_count, stats.execution_count) == (8, 1)
        assert [(b.batch_size, b.compute_infer.count) for b in stats.batch_stats] == [(8, 1)]
        counts = sorted(v for (name, labels), v in front.metrics(per_worker=True).items()
                        if name == "jaxport_inference_success_total"
                        and dict(labels).get("model") == "rows")
        assert counts[-1] == 8 and sum(counts) == 8  # all on one worker


# workers_front: the workers are the subject (the native engine would answer without them).
def test_model_statistics_sum_every_worker(workers_front: BridgeProcess) -> None:
    """Six sequential calls alternate between the two idle workers; the front's
    ModelStatistics counts all six (one worker's answer would count three)."""
    f = stub(workers_front)

    def stats() -> pb.ModelStatistics:
        (s,) = f.ModelStatistics(pb.ModelStatisticsRequest(name="mlp", version="1"),
                                 timeout=60).model_stats
        return s

    def successes(metrics: dict, worker: str) -> float:
        return sum(v for (name, labels), v in metrics.items()
                   if name == "jaxport_inference_success_total"
                   and {("model", "mlp"), ("worker", worker)} <= set(labels))

    before, metrics_before = stats(), workers_front.metrics(per_worker=True)
    for i in range(6):
        f.ModelInfer(mlp_request(np.ones((2, 8), np.float32), rid=str(i)), timeout=60)
    after, metrics_after = stats(), workers_front.metrics(per_worker=True)
    moved = [successes(metrics_after, w) - successes(metrics_before, w) for w in ("0", "1")]
    assert sum(moved) == 6 and min(moved) > 0, moved  # both workers executed some
    assert after.inference_count - before.inference_count == 6
    assert after.execution_count - before.execution_count == 6
    assert after.inference_stats.success.count - before.inference_stats.success.count == 6
    assert after.last_inference >= before.last_inference
    assert (after.name, after.version) == ("mlp", "1")


def test_model_ready_only_when_every_worker_is(front: BridgeProcess) -> None:
    """After an unload, a worker that is killed and restarted loads the repository from disk
    again: it has the model, the other worker has not. The model is not ready (every call,
    whichever worker a single-worker answer would come from) until it is loaded everywhere."""
    f = stub(front)
    f.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="mixed"), timeout=60)
    try:
        before = worker_ready_records(front)
        victim = before[-1]
        os.kill(int(victim["pid"]), signal.SIGKILL)
        wait_for(lambda: any(r["worker"] == victim["worker"] and r["pid"] != victim["pid"]
                             for r in worker_ready_records(front)[len(before):]),
                 f"worker {victim['worker']} restarted")
        front.wait_ready()
        assert not any(f.ModelReady(pb.ModelReadyRequest(name="mixed"), timeout=60).ready
                       for _ in range(6))
        assert all(f.ModelReady(pb.ModelReadyRequest(name="mlp"), timeout=60).ready
                   for _ in range(6))
    finally:
        f.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="mixed"), timeout=120)
    assert all(f.ModelReady(pb.ModelReadyRequest(name="mixed"), timeout=60).ready
               for _ in range(6))
