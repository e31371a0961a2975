"""The server (the front `jaxport serve` starts): port reporting, gRPC health, reflection,
Prometheus metrics, SIGTERM draining, and `jaxport serve` usage errors (one line, exit status 2).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
from bridge_helpers import rpc_error
from google.protobuf import descriptor_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from jaxport.protocol import codecs
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from support.bridge import BridgeProcess, serve_command

SERVICE = "inference.GRPCInferenceService"


def test_reports_bound_ports(bridge):
    """The port file and stdout name every bound port (REST's too: with --port 0 and no
    --http-port it is a free port as well)."""
    ports = json.loads(bridge.port_file.read_text())
    assert ports == {"grpc_port": bridge.port, "metrics_port": bridge.metrics_port,
                     "http_port": ports["http_port"], "pid": bridge.pid}
    assert bridge.port > 0 and bridge.metrics_port > 0 and ports["http_port"] > 0
    lines = bridge.stdout_text().splitlines()
    assert f"jaxport front: listening on 127.0.0.1:{bridge.port}" in lines
    assert f"jaxport front: metrics on {bridge.metrics_url}" in lines
    assert f"jaxport front: REST on 127.0.0.1:{ports['http_port']}/v2" in lines


def test_logs_are_json_lines(bridge):
    lines = [line for line in bridge.log_text().splitlines() if line.strip()]
    assert lines
    records = [json.loads(line) for line in lines]
    assert all({"ts", "level", "logger", "msg"} <= r.keys() for r in records)
    # One line per model version once it serves, saying which engine and how long it took.
    ready = [r for r in records if r["msg"] == "model served"]
    assert {r["model"] for r in ready} == {"mlp", "mixed", "slow", "mlp2p", "ignores"}
    assert all(r["engine"] and r["load_seconds"] > 0 for r in ready), ready


def test_grpc_health(bridge):
    with bridge.channel() as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", SERVICE):
            response = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert response.status == health_pb2.HealthCheckResponse.SERVING
        err = rpc_error(health.Check, health_pb2.HealthCheckRequest(service="nope"), timeout=10)
        assert err.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize("version", ["v1alpha", "v1"])
def test_server_reflection(bridge, version):
    """Both reflection versions (grpcurl asks for v1 first); v1's messages are v1alpha's."""
    with bridge.channel() as channel:
        info = channel.stream_stream(
            f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
            request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
            response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
        )
        requests = [
            reflection_pb2.ServerReflectionRequest(list_services=""),
            reflection_pb2.ServerReflectionRequest(file_containing_symbol=SERVICE),
        ]
        listed, found = list(info(iter(requests), timeout=10))
    names = {s.name for s in listed.list_services_response.service}
    assert {SERVICE, "grpc.health.v1.Health", "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection"} <= names
    files = [descriptor_pb2.FileDescriptorProto.FromString(b)
             for b in found.file_descriptor_response.file_descriptor_proto]
    services = {f"{f.package}.{s.name}": [m.name for m in s.method]
                for f in files for s in f.service}
    assert "ModelInfer" in services[SERVICE] and "ModelStreamInfer" in services[SERVICE]


def test_metrics_endpoint_counts_requests(bridge, stub):
    mv = (("model", "mlp"), ("version", "1"))
    before = bridge.metrics()
    for _ in range(2):
        stub.ModelInfer(codecs.build_infer_request("mlp", {"x": np.ones((2, 8), np.float32)}))
    rpc_error(stub.ModelInfer,
              codecs.build_infer_request("mlp", {"x": np.ones((9, 8), np.float32)}))
    after = bridge.metrics()

    def delta(name: str, labels: tuple[tuple[str, str], ...]) -> float:
        return after.get((name, labels), 0.0) - before.get((name, labels), 0.0)

    assert delta("jaxport_inference_requests_total", mv) == 3
    assert delta("jaxport_inference_success_total", mv) == 2
    assert delta("jaxport_inference_failure_total",
                 (("code", "INVALID_ARGUMENT"), *mv)) == 1
    assert delta("jaxport_inference_request_duration_seconds_count", mv) == 3
    assert delta("jaxport_inference_queue_duration_seconds_count", mv) == 2
    assert delta("jaxport_inference_compute_duration_seconds_count", mv) == 2
    assert delta("jaxport_admission_total", (("model", "mlp"), ("outcome", "admitted"))) == 2
    method = "/inference.GRPCInferenceService/ModelInfer"
    assert delta("jaxport_grpc_requests_total", (("code", "OK"), ("method", method))) == 2
    assert delta("jaxport_grpc_requests_total",
                 (("code", "INVALID_ARGUMENT"), ("method", method))) == 1
    ready = [v for (name, labels), v in bridge.metrics(per_worker=True).items()
             if name == "jaxport_model_ready" and set(mv) <= set(labels)]
    assert ready == [1]  # the one server says it once
    for phase in ("checksum", "weights", "compile", "warmup"):  # mlp: the native engine's
        assert after[("jaxport_model_load_seconds", (*mv[:1], ("phase", phase), mv[1]))] >= 0


def test_sigterm_drains_in_flight_request(repository, gate, stub):
    """A request executing when SIGTERM arrives finishes with its full answer while new work is
    refused. The request is held at the test gate, so it is provably still executing when the
    signal lands and stays so until the test has seen the refusal, on any machine."""
    request = codecs.build_infer_request(
        "slow", {"x": np.full((256, 256), 0.01, np.float32), "n": np.array(3, np.int32)})
    expected = codecs.decode_infer_response(stub.ModelInfer(request, timeout=120))

    with BridgeProcess(repository, "--grace-period-s", "60", env=gate.env) as b, \
            b.channel() as channel:
        own = pb_grpc.GRPCInferenceServiceStub(channel)
        with gate.holding("slow"):
            call = own.ModelInfer.future(request, timeout=300)
            gate.wait_held("slow", 1, calls=[call])  # executing now, until the block ends
            b.send_signal(signal.SIGTERM)
            _wait_for_log(b, "draining")
            with b.channel() as fresh:  # new work is refused while draining
                err = rpc_error(pb_grpc.GRPCInferenceServiceStub(fresh).ServerLive,
                                pb.ServerLiveRequest(), timeout=60)
                assert err.code() == grpc.StatusCode.UNAVAILABLE
            assert not call.done()  # still held: the drain waits for it
        got = codecs.decode_infer_response(call.result(120))
        np.testing.assert_array_equal(got["output"], expected["output"])
        assert b.wait(120) == 0
        messages = [r["msg"] for r in b.log_records()]
        assert messages.index("draining") < messages.index("stopped")


def _wait_for_log(bridge: BridgeProcess, msg: str, timeout: float = 120.0) -> None:
    """Until the bridge has logged `msg` (a bounded wait on a condition, not a sleep)."""
    end = time.monotonic() + timeout
    while not any(r.get("msg") == msg for r in bridge.log_records()):
        assert time.monotonic() < end, f"the bridge never logged {msg!r}"
        time.sleep(0.02)


def _serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JAXPORT_")}
    return subprocess.run([*serve_command(), *args], capture_output=True, text=True,
                          timeout=120, env={**clean, **(env or {})})


@pytest.mark.parametrize(("args", "env", "fragment"), [
    ((), {}, "--repository (or JAXPORT_REPOSITORY) is required"),
    (("--repository", "/nonexistent/repo"), {}, "/nonexistent/repo is not a directory"),
    (("--repository", "."), {"JAXPORT_PORT": "abc"}, "JAXPORT_PORT='abc'"),
    (("--repository", ".", "--port", "70000"), {}, "--port must be in 0..65535, got 70000"),
    (("--repository", ".", "--engine", "tpu"), {}, "invalid choice: 'tpu'"),
    (("--repository", ".", "--bogus"), {}, "unrecognized argument: --bogus"),
])
def test_usage_errors_are_one_line(args, env, fragment):
    proc = _serve(*args, env=env)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("jaxport serve: error: "), proc.stderr
    assert fragment in lines[0]


def test_port_in_use_is_one_line_exit_1(bridge, repository: Path):
    proc = _serve("--repository", str(repository), "--port", str(bridge.port),
                  "--metrics-port", "-1")
    assert proc.returncode == 1, proc.stderr
    assert f"jaxport serve: error: cannot listen on 127.0.0.1:{bridge.port}" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert bridge.alive()


def test_unwritable_port_file_is_one_line_exit_1(repository: Path, tmp_path: Path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    proc = _serve("--repository", str(repository), "--port", "0", "--metrics-port", "-1",
                  "--port-file", str(blocker / "ports.json"))
    assert proc.returncode == 1, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if not ln.startswith("{")]
    assert line.startswith("jaxport serve: error: cannot write --port-file ")
    assert "Traceback" not in proc.stderr


def test_help_lists_flags_and_env_vars():
    proc = _serve("--help")
    assert proc.returncode == 0
    for flag, var in (("--engine", "JAXPORT_ENGINE"), ("--metrics-port", "JAXPORT_METRICS_PORT"),
                      ("--model-version-policy", "JAXPORT_MODEL_VERSION_POLICY")):
        assert flag in proc.stdout and var in proc.stdout


@contextlib.contextmanager
def _held_repository(tmp_path: Path, artifacts) -> Iterator[tuple[str, threading.Event,
                                                                  threading.Event]]:
    """`mlp` as a repository served over HTTP by a server of the test's own that holds the
    answer for its manifest.json until `release` is set (`asked`: the front asked for it):
    a load that provably waits, for as long as the test wants."""
    import functools
    import http.server
    import shutil

    from jaxport.artifact import index as index_mod

    root = tmp_path / "repo"
    shutil.copytree(artifacts["mlp"], root / "mlp" / "1")
    index_mod.write(root)
    asked, release = threading.Event(), threading.Event()

    class Held(http.server.SimpleHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.endswith("/mlp/1/manifest.json"):
                asked.set()
                release.wait(600)
            super().do_GET()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(
        ("127.0.0.1", 0), functools.partial(Held, directory=str(root)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", asked, release
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def test_not_ready_until_the_repository_has_loaded(tmp_path: Path, artifacts):
    """Deterministic: the model's manifest is held (`_held_repository`) until the test lets
    it go; meanwhile the server is live but not ready."""
    with _held_repository(tmp_path, artifacts) as (url, asked, release):
        _not_ready_then_ready(url, asked, release)


def _not_ready_then_ready(url: str, asked: threading.Event, release: threading.Event) -> None:
    bridge = BridgeProcess(url).start(wait_ready=False)
    try:
        assert asked.wait(120), "the server never asked for the manifest"
        with bridge.channel() as channel:
            stub = pb_grpc.GRPCInferenceServiceStub(channel)
            health = health_pb2_grpc.HealthStub(channel)
            assert stub.ServerLive(pb.ServerLiveRequest(), timeout=10).live
            assert not stub.ServerReady(pb.ServerReadyRequest(), timeout=10).ready
            status = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10).status
            assert status == health_pb2.HealthCheckResponse.NOT_SERVING
            assert not stub.ModelReady(pb.ModelReadyRequest(name="mlp"), timeout=10).ready
            (entry,) = stub.RepositoryIndex(pb.RepositoryIndexRequest(), timeout=10).models
            assert (entry.name, entry.version, entry.state) == ("mlp", "1", "LOADING")
            err = rpc_error(stub.ModelInfer, codecs.build_infer_request(
                "mlp", {"x": np.ones((2, 8), np.float32)}), timeout=10)
            assert err.code() == grpc.StatusCode.UNAVAILABLE

            release.set()
            bridge.wait_ready(120)
            assert stub.ServerReady(pb.ServerReadyRequest(), timeout=10).ready
            response = stub.ModelInfer(codecs.build_infer_request(
                "mlp", {"x": np.ones((2, 8), np.float32)}), timeout=30)
            assert codecs.decode_infer_response(response)["output"].shape == (2, 4)
    finally:
        release.set()
        assert bridge.stop() == 0


def test_sigterm_while_a_load_is_stuck_still_exits(tmp_path: Path, artifacts):
    """The manifest is held for the whole test: the load never finishes, SIGTERM still ends
    the server at once with status 0."""
    with _held_repository(tmp_path, artifacts) as (url, asked, _):
        bridge = BridgeProcess(url).start(wait_ready=False)
        try:
            assert asked.wait(120), "the server never asked for the manifest"
            with bridge.channel() as channel:
                stub = pb_grpc.GRPCInferenceServiceStub(channel)
                assert not stub.ServerReady(pb.ServerReadyRequest(), timeout=10).ready
            bridge.send_signal(signal.SIGTERM)
            assert bridge.wait(30) == 0
        finally:
            bridge.stop(grace=1)  # no-op once it has exited; SIGKILL if it hung
