"""Triton's metric families on the front's /metrics (issue 27 item 3, docs/bridge.md "Metrics"):
`nv_inference_*{model,version}` computed by the front from the ModelStatistics it answers, so
a dashboard written for Triton reads the same numbers a statistics client does, summed over
the workers and the native engine (no `worker` label).

Run against a live `jaxport serve` with two workers, once with the native engine (the default:
models execute in the front) and once with `--pjrt-plugin none` (every model on the workers).
Prometheus' own parser (prometheus_client.parser) reads the text; after a known number of
requests every family equals its ModelStatistics field (durations: ns // 1000), and a request
held at the test gate shows in nv_inference_pending_request_count while it runs; scrapes
during a load over gRPC and REST lie between the ModelStatistics read just before and after.
"""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from front_helpers import front_command
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from prometheus_client.parser import text_string_to_metric_families
from support.bridge import BridgeProcess
from support.gate import Gate

# Triton's counter families: ModelStatistics field of one model version.
COUNTERS = {
    "nv_inference_request_success": lambda s: s.inference_stats.success.count,
    "nv_inference_request_failure": lambda s: s.inference_stats.fail.count,
    "nv_inference_count": lambda s: s.inference_count,
    "nv_inference_exec_count": lambda s: s.execution_count,
    "nv_inference_request_duration_us": lambda s: s.inference_stats.success.ns // 1000,
    "nv_inference_queue_duration_us": lambda s: s.inference_stats.queue.ns // 1000,
    "nv_inference_compute_input_duration_us": lambda s: s.inference_stats.compute_input.ns // 1000,
    "nv_inference_compute_infer_duration_us": lambda s: s.inference_stats.compute_infer.ns // 1000,
    "nv_inference_compute_output_duration_us":
        lambda s: s.inference_stats.compute_output.ns // 1000,
}
PENDING = "nv_inference_pending_request_count"


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> Gate:
    return Gate(tmp_path_factory.mktemp("triton-metrics-gate"))


@pytest.fixture(scope="module", params=["native", "workers"])
def server(request: pytest.FixtureRequest, front_binary: Path, repository: Path, gate: Gate,
           tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgeProcess]:
    """Two workers; `native`: the default engine, `workers`: --pjrt-plugin none."""
    engine = () if request.param == "native" else ("--pjrt-plugin", "none")
    with BridgeProcess(repository, *engine, "--http-port", "0", env=gate.env,
                       workdir=tmp_path_factory.mktemp(f"triton-metrics-{request.param}"),
                       command=front_command(front_binary, "--workers", "2")) as f:
        cfg = pb_grpc.GRPCInferenceServiceStub(f.channel()).ModelConfig(
            pb.ModelConfigRequest(name="mlp")).config
        assert cfg.parameters["engine"].string_value == (
            "native" if request.param == "native" else "exported"), cfg
        yield f


def scrape(server: BridgeProcess) -> dict[tuple[str, str, str], float]:
    """The nv_inference_* samples by (family, model, version), read by Prometheus' parser; a
    sample with any other label set fails the test."""
    with urllib.request.urlopen(server.metrics_url, timeout=30) as response:
        text = response.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        if not family.name.startswith("nv_inference_"):
            continue
        assert family.type == ("gauge" if family.name == PENDING else "counter"), family
        for sample in family.samples:
            assert set(sample.labels) == {"model", "version"}, sample
            out[(family.name, sample.labels["model"], sample.labels["version"])] = sample.value
    return out


def statistics(server: BridgeProcess) -> dict[tuple[str, str], pb.ModelStatistics]:
    stub = pb_grpc.GRPCInferenceServiceStub(server.channel())
    return {(s.name, s.version): s
            for s in stub.ModelStatistics(pb.ModelStatisticsRequest(), timeout=60).model_stats}


def assert_agree(samples: dict, stats: dict) -> None:
    """Every model version of ModelStatistics has every family, equal to its field."""
    for (model, version), s in stats.items():
        for name, field in COUNTERS.items():
            assert samples[(name, model, version)] == field(s), (name, model, version, s)
    assert {(m, v) for (_, m, v) in samples} == set(stats)


def mlp_request(x: np.ndarray) -> pb.ModelInferRequest:
    req = pb.ModelInferRequest(model_name="mlp")
    req.inputs.add(name="x", datatype="FP32", shape=list(x.shape))
    req.raw_input_contents.append(x.tobytes())
    return req


def test_triton_families_equal_model_statistics(server: BridgeProcess) -> None:
    stub = pb_grpc.GRPCInferenceServiceStub(server.channel())
    before = scrape(server)
    assert_agree(before, statistics(server))
    for _ in range(3):
        stub.ModelInfer(mlp_request(np.ones((2, 8), np.float32)), timeout=60)
    with pytest.raises(grpc.RpcError) as info:
        stub.ModelInfer(mlp_request(np.ones((2, 5), np.float32)), timeout=60)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    after, stats = scrape(server), statistics(server)
    assert_agree(after, stats)

    def delta(name: str) -> float:
        return after[(name, "mlp", "1")] - before[(name, "mlp", "1")]

    assert delta("nv_inference_request_success") == 3
    assert delta("nv_inference_request_failure") == 1
    assert delta("nv_inference_exec_count") == 3
    assert delta("nv_inference_count") == 3  # one request is one inference (no batching)
    assert delta("nv_inference_request_duration_us") > 0
    assert delta("nv_inference_compute_infer_duration_us") > 0
    assert after[(PENDING, "mlp", "1")] == 0


def test_a_running_request_is_pending(server: BridgeProcess, gate: Gate) -> None:
    stub = pb_grpc.GRPCInferenceServiceStub(server.channel())
    req = pb.ModelInferRequest(model_name="slow")
    req.inputs.add(name="x", datatype="FP32", shape=[256, 256])
    req.inputs.add(name="n", datatype="INT32", shape=[])
    req.raw_input_contents.extend([np.ones((256, 256), np.float32).tobytes(),
                                   np.int32(2).tobytes()])
    successes = scrape(server)[("nv_inference_request_success", "slow", "1")]
    with gate.holding("slow"):
        call = stub.ModelInfer.future(req, timeout=120)
        gate.wait_held("slow", 1, calls=[call])
        during = scrape(server)
        assert during[(PENDING, "slow", "1")] == 1
        assert during[(PENDING, "mlp", "1")] == 0
        assert during[("nv_inference_request_success", "slow", "1")] == successes
        gate.release("slow")
        call.result()
    after = scrape(server)
    assert after[(PENDING, "slow", "1")] == 0
    assert after[("nv_inference_request_success", "slow", "1")] == successes + 1
    assert_agree(after, statistics(server))


def test_scrapes_during_load_lie_between_statistics(server: BridgeProcess) -> None:
    """While 24 requests run (gRPC futures and REST calls from a thread), every scrape reads
    each counter between the ModelStatistics answered just before it and just after it."""
    stub = pb_grpc.GRPCInferenceServiceStub(server.channel())
    start = statistics(server)[("mlp", "1")].inference_stats.success.count
    rest_url = (f"http://127.0.0.1:{json.loads(server.port_file.read_text())['http_port']}"
                "/v2/models/mlp/infer")
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 8],
                                   "data": [1.0] * 16}]}).encode()

    def rest_calls() -> None:
        for _ in range(8):
            post = urllib.request.Request(rest_url, data=body, method="POST",
                                          headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(post, timeout=60) as response:
                assert response.status == 200

    rest = threading.Thread(target=rest_calls)
    rest.start()
    calls = [stub.ModelInfer.future(mlp_request(np.ones((2, 8), np.float32)), timeout=120)
             for _ in range(16)]
    scrapes = 0
    while scrapes < 3 or not all(c.done() for c in calls) or rest.is_alive():
        low = statistics(server)[("mlp", "1")]
        samples = scrape(server)
        high = statistics(server)[("mlp", "1")]
        for name, field in COUNTERS.items():
            assert field(low) <= samples[(name, "mlp", "1")] <= field(high), name
        assert 0 <= samples[(PENDING, "mlp", "1")] <= 24
        scrapes += 1
    rest.join()
    for c in calls:
        c.result()
    after = scrape(server)
    assert after[("nv_inference_request_success", "mlp", "1")] == start + 24
    assert after[(PENDING, "mlp", "1")] == 0
    assert_agree(after, statistics(server))
