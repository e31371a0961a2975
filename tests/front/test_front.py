"""The front (cmd/jaxport-front, Go), the one server: answers equal to JAX's, errors with
their status and message (the front's validation and repository), health, reflection (v1 and
v1alpha), model control (load/unload in explicit mode), message limits, streams, TLS and
tokens, metrics counted by the front for every model, and worker supervision (a SIGKILLed
worker is restarted and its models re-loaded; faults in test_front_faults.py).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import grpc
import jax
import ml_dtypes
import numpy as np
import pytest
from front_helpers import front_command, worker_records
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from support.bridge import BridgeProcess
from support.gate import Gate
from support.waiting import wait_until

SERVICE = "inference.GRPCInferenceService"
WORKER_GONE = "execution worker exited while handling the request"


def stub(server: BridgeProcess) -> pb_grpc.GRPCInferenceServiceStub:
    return pb_grpc.GRPCInferenceServiceStub(server.channel())


def rpc_error(call, *args, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as info:
        call(*args, **kwargs)
    return info.value


def mlp_request(x: np.ndarray, typed: bool = False, rid: str = "r1") -> pb.ModelInferRequest:
    req = pb.ModelInferRequest(model_name="mlp", id=rid)
    t = req.inputs.add(name="x", datatype="FP32", shape=list(x.shape))
    if typed:
        t.contents.fp32_contents.extend(x.ravel().tolist())
    else:
        req.raw_input_contents.append(x.tobytes())
    return req


def mlp_reference(x: np.ndarray) -> np.ndarray:
    import bridge_models as m

    return np.asarray(jax.jit(m.mlp)(m.mlp_params(), x))


def slow_request(n: int = 1) -> pb.ModelInferRequest:
    req = pb.ModelInferRequest(model_name="slow", id="slow")
    req.inputs.add(name="x", datatype="FP32", shape=[256, 256])
    req.inputs.add(name="n", datatype="INT32", shape=[])
    req.raw_input_contents.append(np.full((256, 256), 0.01, np.float32).tobytes())
    req.raw_input_contents.append(np.int32(n).tobytes())
    return req


# -- server RPCs, health, reflection -------------------------------------------------------------

def test_server_rpcs(front: BridgeProcess) -> None:
    """Answered by the front itself, no worker involved (every field: tests/bridge)."""
    f = stub(front)
    assert f.ServerLive(pb.ServerLiveRequest()).live
    assert f.ServerReady(pb.ServerReadyRequest()).ready
    assert f.ServerMetadata(pb.ServerMetadataRequest()).name == "jaxport"
    for name in ("mlp", "mixed", "slow"):
        assert f.ModelReady(pb.ModelReadyRequest(name=name)).ready
        meta = f.ModelMetadata(pb.ModelMetadataRequest(name=name))
        assert (meta.name, list(meta.versions)) == (name, ["1"])
        assert f.ModelConfig(pb.ModelConfigRequest(name=name)).config.name == name
    index = f.RepositoryIndex(pb.RepositoryIndexRequest())
    assert {(m.name, m.version, m.state) for m in index.models} == {
        (name, "1", "READY") for name in ("big", "mixed", "mlp", "slow")}


def test_health_serving(front: BridgeProcess) -> None:
    with front.channel() as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", SERVICE):
            assert health.Check(health_pb2.HealthCheckRequest(service=service)).status == (
                health_pb2.HealthCheckResponse.SERVING)


def test_health_per_model(front: BridgeProcess) -> None:
    """A model's name as the health service (grpc-health-probe -service=MODEL): SERVING when it
    is ready, NOT_FOUND naming it when there is no such model (health_model.go)."""
    with front.channel() as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for model in ("mlp", "big"):
            assert health.Check(health_pb2.HealthCheckRequest(service=model),
                                timeout=30).status == health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as info:
            health.Check(health_pb2.HealthCheckRequest(service="no_such_model"), timeout=30)
        assert info.value.code() == grpc.StatusCode.NOT_FOUND
        assert "no model 'no_such_model'" in info.value.details()


def _reflect(channel: grpc.Channel, version: str,
             request: reflection_pb2.ServerReflectionRequest
             ) -> reflection_pb2.ServerReflectionResponse:
    # v1 and v1alpha messages are the same on the wire; grpcio-reflection ships v1alpha only.
    call = channel.stream_stream(
        f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString)
    return next(iter(call(iter([request]), timeout=30)))


@pytest.mark.parametrize("version", ["v1", "v1alpha"])
def test_reflection_lists_and_describes(front: BridgeProcess, version: str) -> None:
    from google.protobuf import descriptor_pb2

    with front.channel() as channel:
        listed = _reflect(channel, version,
                          reflection_pb2.ServerReflectionRequest(list_services=""))
        names = {s.name for s in listed.list_services_response.service}
        assert {SERVICE, "grpc.health.v1.Health"} <= names
        found = _reflect(channel, version, reflection_pb2.ServerReflectionRequest(
            file_containing_symbol=SERVICE))
    files = [descriptor_pb2.FileDescriptorProto.FromString(b)
             for b in found.file_descriptor_response.file_descriptor_proto]
    methods = {m.name for f in files for s in f.service if s.name == "GRPCInferenceService"
               for m in s.method}
    assert {"ModelInfer", "ModelStreamInfer", "ModelMetadata"} <= methods


# -- inference -----------------------------------------------------------------------------------

@pytest.mark.parametrize("typed", [False, True], ids=["raw", "typed"])
def test_infer_equals_jax(front: BridgeProcess, typed: bool) -> None:
    x = np.random.default_rng(3).standard_normal((2, 8)).astype(np.float32)
    got = stub(front).ModelInfer(mlp_request(x, typed), timeout=60)
    assert got.id == "r1" and got.model_name == "mlp" and got.model_version == "1"
    y = np.frombuffer(got.raw_output_contents[0], np.float32).reshape(2, 4)
    np.testing.assert_allclose(y, mlp_reference(x), rtol=1e-5, atol=1e-6)


def test_infer_mixed_dtypes_equals_jax(front: BridgeProcess) -> None:
    import bridge_models as m

    req = pb.ModelInferRequest(model_name="mixed", id="m")
    a = np.arange(12, dtype=np.float32).reshape(3, 4).astype(ml_dtypes.bfloat16)
    idx, flag = np.array([-1, 0, 5], np.int64), np.array([True, False, True])
    for name, dt, arr in (("a", "BF16", a), ("idx", "INT64", idx), ("flag", "BOOL", flag)):
        req.inputs.add(name=name, datatype=dt, shape=list(arr.shape))
        req.raw_input_contents.append(arr.tobytes())
    req.outputs.add(name="s")
    req.outputs.add(name="h")
    got = stub(front).ModelInfer(req, timeout=60)
    assert [(o.name, o.datatype, list(o.shape)) for o in got.outputs] == [
        ("s", "INT64", [3]), ("h", "BF16", [3, 4])]
    with jax.enable_x64(True):
        h, s, _ = jax.jit(m.mixed)(m.mixed_params(), a, idx, flag)
    np.testing.assert_array_equal(np.frombuffer(got.raw_output_contents[0], np.int64), s)
    np.testing.assert_array_equal(
        np.frombuffer(got.raw_output_contents[1], ml_dtypes.bfloat16).reshape(3, 4), h)


KNOWN = "(known models: big, mixed, mlp, slow)"
MISSING_X = "missing input 'x': model 'mlp' (version 1) expects FP32 [2, 8]"
BAD_REQUESTS = {
    "unknown model": (pb.ModelInferRequest(model_name="nope"),
                      grpc.StatusCode.NOT_FOUND, f"unknown model 'nope' {KNOWN}"),
    "unknown version": (pb.ModelInferRequest(model_name="mlp", model_version="7"),
                        grpc.StatusCode.NOT_FOUND, "model 'mlp' has no version '7' (known: 1)"),
    "missing input": (pb.ModelInferRequest(model_name="mlp", id="x"),
                      grpc.StatusCode.INVALID_ARGUMENT, MISSING_X),
    "wrong shape": (mlp_request(np.zeros((5, 8), np.float32)), grpc.StatusCode.INVALID_ARGUMENT,
                    "input 'x': expected shape [2, 8], got [5, 8]"),
    "short bytes": (pb.ModelInferRequest(
        model_name="mlp", inputs=[pb.ModelInferRequest.InferInputTensor(
            name="x", datatype="FP32", shape=[2, 8])], raw_input_contents=[b"\0" * 12]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "input 'x': raw contents hold 12 bytes; expected 64 (shape [2, 8] x 4 bytes per FP32 "
        "element)"),
    "unknown output": (pb.ModelInferRequest(
        model_name="mlp", inputs=[pb.ModelInferRequest.InferInputTensor(
            name="x", datatype="FP32", shape=[2, 8])], raw_input_contents=[b"\0" * 64],
        outputs=[pb.ModelInferRequest.InferRequestedOutputTensor(name="nope")]),
        grpc.StatusCode.INVALID_ARGUMENT,
        "unknown requested output 'nope': model 'mlp' (version 1) has outputs 'output'"),
}


@pytest.mark.parametrize("case", list(BAD_REQUESTS))
def test_bad_requests_get_their_status_and_message(front: BridgeProcess, case: str) -> None:
    req, code, details = BAD_REQUESTS[case]
    got = rpc_error(stub(front).ModelInfer, req, timeout=60)
    assert (got.code(), got.details()) == (code, details)


def test_other_rpc_errors_get_their_status_and_message(front: BridgeProcess) -> None:
    calls = [("ModelMetadata", pb.ModelMetadataRequest(name="nope"),
              grpc.StatusCode.NOT_FOUND, f"unknown model 'nope' {KNOWN}"),
             ("ModelConfig", pb.ModelConfigRequest(name="mlp", version="9"),
              grpc.StatusCode.NOT_FOUND, "model 'mlp' has no version '9' (known: 1)"),
             ("RepositoryIndex", pb.RepositoryIndexRequest(repository_name="other"),
              grpc.StatusCode.NOT_FOUND, "unknown repository 'other': this server has one "
              "repository; send an empty repository_name"),
             ("SystemSharedMemoryStatus", pb.SystemSharedMemoryStatusRequest(),
              grpc.StatusCode.FAILED_PRECONDITION, "SystemSharedMemoryStatus: system shared "
              "memory is disabled on this server; start it with --system-shared-memory (env "
              "JAXPORT_SYSTEM_SHARED_MEMORY=1) to allow same-host clients to pass tensors "
              "through /dev/shm (see docs/security.md)")]
    for method, req, code, details in calls:
        got = rpc_error(getattr(stub(front), method), req, timeout=60)
        assert (got.code(), got.details()) == (code, details), method


def test_stream_answers_in_order_errors_in_place(front: BridgeProcess) -> None:
    x = np.ones((2, 8), np.float32)
    requests = [mlp_request(x, rid="s1"), pb.ModelInferRequest(model_name="mlp", id="bad"),
                mlp_request(x * 2, typed=True, rid="s3"), pb.ModelInferRequest(model_name="nope",
                                                                               id="s4")]
    got = list(stub(front).ModelStreamInfer(iter(requests), timeout=60))
    assert [r.infer_response.id for r in got] == ["s1", "bad", "s3", "s4"]
    assert [r.error_message for r in got] == [
        "", f"INVALID_ARGUMENT: {MISSING_X}", "", f"NOT_FOUND: unknown model 'nope' {KNOWN}"]
    for r, value in ((got[0], x), (got[2], x * 2)):
        assert [o.name for o in r.infer_response.outputs] == ["output"]
        np.testing.assert_allclose(
            np.frombuffer(r.infer_response.raw_output_contents[0], np.float32).reshape(2, 4),
            mlp_reference(value), rtol=1e-5, atol=1e-6)


def test_unload_and_load(front_binary: Path, repository: Path, tmp_path: Path) -> None:
    """Explicit model control: unload stops serving a model (UNAVAILABLE), load serves it
    again; the default mode (none) refuses both, as Triton does."""
    args = ["--model-control-mode", "explicit", "--load-model", "*"]
    with BridgeProcess(repository, *args, workdir=tmp_path / "front",
                       command=front_command(front_binary)) as server:
        f = stub(server)
        f.RepositoryModelUnload(pb.RepositoryModelUnloadRequest(model_name="mixed"), timeout=60)
        assert not f.ModelReady(pb.ModelReadyRequest(name="mixed"), timeout=30).ready
        err = rpc_error(f.ModelMetadata, pb.ModelMetadataRequest(name="mixed"))
        assert (err.code(), err.details()) == (
            grpc.StatusCode.UNAVAILABLE,
            "model 'mixed' has no ready version (version 1 is UNAVAILABLE: unloaded)")
        f.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="mixed"), timeout=120)
        assert f.ModelReady(pb.ModelReadyRequest(name="mixed"), timeout=30).ready


def test_load_and_unload_refused_by_default(front: BridgeProcess) -> None:
    f = stub(front)
    for call, req in ((f.RepositoryModelUnload, pb.RepositoryModelUnloadRequest(model_name="mlp")),
                      (f.RepositoryModelLoad, pb.RepositoryModelLoadRequest(model_name="mlp"))):
        err = rpc_error(call, req, timeout=60)
        # Triton's text for the default mode's refusal (repository.ControlRefused).
        assert (err.code(), err.details()) == (
            grpc.StatusCode.UNAVAILABLE,
            "explicit model load / unload is not allowed if polling is enabled")
    assert f.ModelReady(pb.ModelReadyRequest(name="mlp"), timeout=30).ready


def test_concurrent_requests(front: BridgeProcess) -> None:
    from concurrent.futures import ThreadPoolExecutor

    f = stub(front)
    xs = [np.full((2, 8), i, np.float32) for i in range(32)]
    with ThreadPoolExecutor(16) as pool:
        outs = list(pool.map(lambda i: f.ModelInfer(mlp_request(xs[i], rid=str(i)), timeout=60),
                             range(32)))
    for i, out in enumerate(outs):
        assert out.id == str(i)
        np.testing.assert_allclose(
            np.frombuffer(out.raw_output_contents[0], np.float32).reshape(2, 4),
            mlp_reference(xs[i]), rtol=1e-5, atol=1e-6)


# -- supervision ---------------------------------------------------------------------------------

# workers_front: the workers are the subject (the native engine would answer without them).
def test_killed_worker_is_restarted(workers_front: BridgeProcess) -> None:
    f = stub(workers_front)
    x = np.ones((2, 8), np.float32)
    f.ModelInfer(mlp_request(x), timeout=60)
    before = worker_records(workers_front)
    victim = before[-1]
    os.kill(int(victim["pid"]), signal.SIGKILL)
    wait_until(lambda: any(r["worker"] == victim["worker"] and r["pid"] != victim["pid"]
                         for r in worker_records(workers_front)[len(before):]),
             f"worker {victim['worker']} restarted")
    for i in range(8):
        out = f.ModelInfer(mlp_request(x, rid=f"after{i}"), timeout=60)
        np.testing.assert_allclose(
            np.frombuffer(out.raw_output_contents[0], np.float32).reshape(2, 4),
            mlp_reference(x), rtol=1e-5, atol=1e-6)


# -- separate fronts -----------------------------------------------------------------------------

def test_message_limit(front_binary: Path, repository: Path, tmp_path: Path) -> None:
    limit = ["--max-message-bytes", "65536"]
    with BridgeProcess(repository, *limit, workdir=tmp_path / "front",
                       command=front_command(front_binary, "--workers", "1")) as f:
        big = slow_request()  # 256 KiB of input
        got = rpc_error(stub(f).ModelInfer, big, timeout=60)
        # grpc-go's refusal, naming the message's size and the limit.
        assert (got.code(), got.details()) == (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"grpc: received message larger than max ({big.ByteSize()} vs. 65536)")
        assert stub(f).ModelInfer(mlp_request(np.ones((2, 8), np.float32)), timeout=60).id


def test_sigterm_stops_front_and_workers(front_binary: Path, repository: Path,
                                         tmp_path: Path) -> None:
    f = BridgeProcess(repository, "--pjrt-plugin", "none", workdir=tmp_path / "front",
                      command=front_command(front_binary, "--workers", "2"))
    with f:
        assert stub(f).ServerLive(pb.ServerLiveRequest()).live
        pids = {int(r["pid"]) for r in worker_records(f)}
        assert len(pids) == 2
        f.send_signal(signal.SIGTERM)
        assert f.wait(60) == 0
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    assert "jaxport front: listening on 127.0.0.1:" in f.stdout_text()


def test_usage_error_is_one_line(front_binary: Path, repository: Path) -> None:
    """The front run by hand: a flag it does not know, and a value it cannot use, are one
    line each, status 2, naming the flag."""
    import subprocess

    for args, line in (
            (["--repository", str(repository), "--bogus"],
             "jaxport-front: error: unrecognized argument: --bogus (see `jaxport-front --help`)\n"),
            (["--repository", str(repository), "--workers", "0"],
             "jaxport-front: error: --workers must be >= 1, got 0\n")):
        proc = subprocess.run([str(front_binary), *args], capture_output=True, text=True,
                              timeout=60)
        assert (proc.returncode, proc.stderr) == (2, line)


def test_mtls_and_token(front_binary: Path, repository: Path, tmp_path: Path) -> None:
    """Liveness open without a token, metadata refused without it (UNAUTHENTICATED, the
    documented details) and answered with it; no client certificate: no connection."""
    from support.certs import make_pki

    pki = make_pki(tmp_path / "pki")
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    token.chmod(0o600)
    args = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
            "--tls-client-ca", str(pki.ca_cert), "--auth-token-file", str(token)]
    creds = grpc.ssl_channel_credentials(
        root_certificates=pki.ca_cert.read_bytes(), private_key=pki.client_key.read_bytes(),
        certificate_chain=pki.client_cert.read_bytes())
    server = BridgeProcess(repository, *args, workdir=tmp_path / "front",
                           command=front_command(front_binary, "--workers", "1"))
    with server.start(credentials=creds):
        with grpc.secure_channel(server.address, creds) as channel:
            s = pb_grpc.GRPCInferenceServiceStub(channel)
            assert s.ServerLive(pb.ServerLiveRequest()).live  # open without a token
            refused = rpc_error(s.ServerMetadata, pb.ServerMetadataRequest())
            meta = s.ServerMetadata(pb.ServerMetadataRequest(),
                                    metadata=[("authorization", "Bearer s3cret")])
        no_cert = grpc.ssl_channel_credentials(root_certificates=pki.ca_cert.read_bytes())
        with grpc.secure_channel(server.address, no_cert) as channel:
            err = rpc_error(pb_grpc.GRPCInferenceServiceStub(channel).ServerLive,
                            pb.ServerLiveRequest(), timeout=30)
    assert (refused.code(), refused.details()) == (
        grpc.StatusCode.UNAUTHENTICATED,
        "missing or invalid bearer token: send metadata 'authorization: Bearer <token>'")
    assert meta.name == "jaxport"
    assert err.code() == grpc.StatusCode.UNAVAILABLE


def test_bad_tls_flag_is_refused_in_one_line(front_binary: Path, repository: Path,
                                                 tmp_path: Path) -> None:
    import subprocess

    # The front run by hand.
    proc = subprocess.run([str(front_binary), "--repository", str(repository), "--port", "0",
                           "--tls-cert", str(tmp_path / "missing.pem")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert proc.stderr == ("jaxport-front: error: TLS needs both --tls-cert and --tls-key; "
                           "--tls-key is missing\n")


def test_metrics_count_every_model_in_the_front(front: BridgeProcess,
                                                 workers_front: BridgeProcess) -> None:
    """One registry, the front's, whichever engine executes: no worker label."""
    for server in (front, workers_front):
        before = server.metrics()
        f = stub(server)
        for i in range(6):
            f.ModelInfer(mlp_request(np.ones((2, 8), np.float32), rid=str(i)), timeout=60)
        rpc_error(f.ModelInfer, pb.ModelInferRequest(model_name="mlp", id="bad"))
        after = server.metrics()

        def delta(sample: str, after: dict = after, before: dict = before, **labels: str
                  ) -> float:
            def total(m: dict) -> float:
                return sum(v for (name, ls), v in m.items()
                           if name == sample and labels.items() <= dict(ls).items())
            return total(after) - total(before)

        assert delta("jaxport_inference_success_total", model="mlp") == 6
        assert delta("jaxport_inference_failure_total", model="mlp", code="INVALID_ARGUMENT") == 1
        assert delta("jaxport_grpc_requests_total", method=f"/{SERVICE}/ModelInfer", code="OK") == 6
        assert after[("jaxport_model_ready", (("model", "mlp"), ("version", "1")))] == 1
        assert not any(("worker", w) in ls for (_, ls) in server.metrics(per_worker=True)
                       for w in ("0", "1", "front"))
    assert workers_front.metrics()[("jaxport_front_workers", (("state", "running"),))] == 2
    assert front.metrics()[("jaxport_front_workers", (("state", "running"),))] == 0


def test_large_tensor(front: BridgeProcess) -> None:
    x = np.random.default_rng(5).standard_normal(4 << 20).astype(np.float32)  # 16 MiB
    req = pb.ModelInferRequest(model_name="big", id="big")
    req.inputs.add(name="x", datatype="FP32", shape=[x.size])
    req.raw_input_contents.append(x.tobytes())
    got = stub(front).ModelInfer(req, timeout=120)
    assert (got.id, [(o.name, o.datatype, list(o.shape)) for o in got.outputs]) == (
        "big", [("output", "FP32", [x.size])])
    np.testing.assert_array_equal(np.frombuffer(got.raw_output_contents[0], np.float32),
                                  x * np.float32(2.0) + np.float32(0.5))


def test_sigterm_drain_cut_exits_3(front_binary: Path, repository: Path, tmp_path: Path) -> None:
    gate = Gate(tmp_path / "gate")
    f = BridgeProcess(repository, "--grace-period-s", "0.2", env=gate.env,
                      workdir=tmp_path / "front",
                      command=front_command(front_binary, "--workers", "1"))
    with f:
        gate.hold("slow")
        try:
            call = stub(f).ModelInfer.future(slow_request(), timeout=120)
            gate.wait_held("slow", 1, calls=[call])
            f.send_signal(signal.SIGTERM)
            assert f.wait(120) == 3  # jaxport serve's EXIT_CUT: a call was still running
            # Cut, not answered: the front stops its transports at the end of the grace
            # period (main.go), so the caller sees gRPC's UNAVAILABLE for a closed connection;
            # no message of the front's reaches it. The front's records name the drain.
            err = call.exception(timeout=60)
            assert isinstance(err, grpc.RpcError), err
            assert err.code() == grpc.StatusCode.UNAVAILABLE, err.details()
            records = [r for r in f.log_records() if r.get("logger") == "jaxport.front"]
            assert [r["grace_period_s"] for r in records if r.get("msg") == "draining"] == [0.2]
            assert [r["exit_status"] for r in records if r.get("msg") == "stopped"] == [3]
        finally:
            gate.release("slow")
