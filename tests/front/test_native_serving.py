"""The native engine serving (issue 26, docs/native-engine.md): `jaxport serve` with no engine
flag executes every model the engine can run in the front, through the PJRT C API, and leaves
the rest to the Python workers, started for those models only.

Proof that no Python is on a native model's request path: the worker process is stopped
(SIGSTOP) and native models still answer, unary, streamed and over REST, equal to JAX, while a
model on the workers cannot. Which engine serves each model shows in ModelConfig (`engine`,
`reason`), in `jaxport model list` and in one load log line each; a plugin that cannot be
loaded and a model outside the plugin's StableHLO window are one line each, and those models
are served by the workers. Statistics and metrics count every request in the front.

Needs XLA's CPU plugin in build/pjrt/ (`make setup` installs it); fails in one line without.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import grpc
import jax
import numpy as np
import pytest
from front_helpers import FEATURES, PLUGIN, rows_model, rows_params
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from support.bridge import BridgeProcess

ROOT = Path(__file__).resolve().parents[2]
MODELS = ROOT / "tests" / "models"


@pytest.fixture(scope="module")
def native_repo(tmp_path_factory: pytest.TempPathFactory, artifacts: dict[str, Path],
                batched_repo: Path) -> Path:
    """mlp (one fixed program), rows (batch sizes 1, 4, 8), checked (every check kind), poly
    (shape-polymorphic only: the workers') and future (mlp with a StableHLO target of 1.99.0:
    outside the plugin's window, the workers')."""
    if not PLUGIN.is_file():
        pytest.fail(f"{PLUGIN.relative_to(ROOT)} missing: run `make setup`", pytrace=False)
    if str(MODELS) not in sys.path:
        sys.path.insert(0, str(MODELS))
    import checked
    import seq
    from jaxport.exporter import export

    repo = tmp_path_factory.mktemp("native-repo")
    shutil.copytree(artifacts["mlp"], repo / "mlp" / "1")
    shutil.copytree(batched_repo / "rows" / "1", repo / "rows" / "1")
    inputs = {k: jax.ShapeDtypeStruct(s, d) for k, (d, s) in checked.INPUTS.items()}
    export(checked.predict, checked.init(jax.random.key(0)), inputs, repo / "checked" / "1",
           checks=("user", "index", "nan", "div"), check_goldens=checked.check_goldens(),
           quiet=True, name="checked")
    export(seq.predict, seq.init(jax.random.key(0)),
           {"tokens": (("B", "T"), np.int32), "mask": (("B", "T"), np.bool_)},
           repo / "poly" / "1", dims={"B": "1..64", "T": "8..2048:8"}, goldens=0, quiet=True,
           name="poly")
    shutil.copytree(artifacts["mlp"], repo / "swap" / "1")
    future = shutil.copytree(artifacts["mlp"], repo / "future" / "1")
    manifest = json.loads((future / "manifest.json").read_text())
    manifest["versions"]["stablehloTarget"] = "1.99.0"
    (future / "manifest.json").write_text(json.dumps(manifest))
    return repo


@pytest.fixture(scope="module")
def native(native_repo: Path, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[BridgeProcess]:
    """`jaxport serve` as shipped (no engine flag, one worker for poly and future), REST on,
    explicit model control (a test reloads a model)."""
    with BridgeProcess(native_repo, "--http-port", "0", "--model-control-mode", "explicit",
                       "--load-model", "*",
                       workdir=tmp_path_factory.mktemp("native-serve")) as server:
        yield server


def stub(server: BridgeProcess) -> pb_grpc.GRPCInferenceServiceStub:
    return pb_grpc.GRPCInferenceServiceStub(server.channel())


def engine_of(server: BridgeProcess, model: str) -> str:
    cfg = stub(server).ModelConfig(pb.ModelConfigRequest(name=model)).config
    assert "artifact" not in cfg.parameters  # the server's paths stay in the server
    assert ("reason" in cfg.parameters) == (cfg.parameters["engine"].string_value != "native")
    return cfg.parameters["engine"].string_value


def served_records(server: BridgeProcess) -> dict[str, dict[str, object]]:
    return {str(r["model"]): r for r in server.log_records()
            if r.get("logger") == "jaxport.front" and r.get("msg") == "model served"}


def mlp_request(x: np.ndarray, model: str = "mlp") -> pb.ModelInferRequest:
    req = pb.ModelInferRequest(model_name=model, id="n1")
    req.inputs.add(name="x", datatype="FP32", shape=list(x.shape))
    req.raw_input_contents.append(x.tobytes())
    return req


def mlp_reference(x: np.ndarray) -> np.ndarray:
    import bridge_models as m

    return np.asarray(jax.jit(m.mlp)(m.mlp_params(), x))


def output(resp: pb.ModelInferResponse, i: int = 0) -> np.ndarray:
    return np.frombuffer(resp.raw_output_contents[i], np.float32).reshape(resp.outputs[i].shape)


def http_port(server: BridgeProcess) -> int:
    return int(json.loads(server.port_file.read_text())["http_port"])


def worker_pids(server: BridgeProcess) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(server.pid)], capture_output=True, text=True)
    pids = [int(p) for p in out.stdout.split()]
    assert len(pids) == 1, out  # --workers 1: started for the models that need them
    return pids


@contextmanager
def workers_stopped(server: BridgeProcess) -> Iterator[None]:
    """Every worker process stopped (SIGSTOP) while the block runs: nothing Python answers."""
    pids = worker_pids(server)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def test_each_model_shows_its_engine(native: BridgeProcess) -> None:
    assert {m: engine_of(native, m) for m in ("mlp", "rows", "checked", "poly", "future")} == {
        "mlp": "native", "rows": "native", "checked": "native", "poly": "exported",
        "future": "exported"}
    records = served_records(native)
    assert {m: r["engine"] for m, r in records.items()} == {
        "mlp": "native", "rows": "native", "checked": "native", "poly": "exported",
        "future": "exported", "swap": "native"}
    reason = ("shape-polymorphic program only (no --buckets): only model.jaxexport runs it, "
              "under jax")
    assert records["poly"]["reason"] == reason
    assert stub(native).ModelConfig(pb.ModelConfigRequest(name="poly")).config.parameters[
        "reason"].string_value == reason
    assert records["future"]["reason"] == (
        f"StableHLO target 1.99.0 is outside the window 0.9.0..1.20.0 of the PJRT plugin {PLUGIN}")
    # `jaxport model list` shows it too.
    jaxport = Path(sys.executable).with_name("jaxport")
    listed = subprocess.run([str(jaxport), "model", "list", "--url", native.address],
                            capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert "ENGINE" in listed.stdout.splitlines()[0], listed.stdout
    rows = {line.split()[0]: line.split() for line in listed.stdout.splitlines()[1:]}
    assert rows["mlp"][3] == "native" and rows["poly"][3] == "exported", listed.stdout


def test_native_models_answer_with_every_worker_stopped(native: BridgeProcess) -> None:
    f = stub(native)
    x = np.random.default_rng(3).standard_normal((2, 8)).astype(np.float32)
    want = mlp_reference(x)
    rows_x = np.random.default_rng(4).standard_normal((3, FEATURES)).astype(np.float32)
    rows_want = np.asarray(jax.jit(rows_model)(rows_params(), rows_x))
    with workers_stopped(native):
        got = f.ModelInfer(mlp_request(x), timeout=60)
        assert (got.model_name, got.model_version, got.id) == ("mlp", "1", "n1")
        np.testing.assert_allclose(output(got), want, rtol=1e-5, atol=1e-6)
        # 3 rows on programs of 1, 4, 8: padded to 4, cut back to 3.
        req = pb.ModelInferRequest(model_name="rows")
        req.inputs.add(name="x", datatype="FP32", shape=[3, FEATURES])
        req.raw_input_contents.append(rows_x.tobytes())
        got = f.ModelInfer(req, timeout=60)
        assert list(got.outputs[0].shape) == [3, 3]
        np.testing.assert_allclose(output(got), rows_want, rtol=1e-5, atol=1e-6)
        # A stream: a good request, a bad one (an error response, the stream goes on), a good one.
        streamed = list(f.ModelStreamInfer(iter([mlp_request(x), mlp_request(x[:1]),
                                                 mlp_request(x)]), timeout=60))
        assert [s.error_message for s in streamed] == [
            "", "INVALID_ARGUMENT: input 'x': expected shape [2, 8], got [1, 8]", ""]
        np.testing.assert_allclose(output(streamed[0].infer_response), want, rtol=1e-5,
                                   atol=1e-6)
        body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [2, 8],
                                       "data": x.ravel().tolist()}]}).encode()
        rest = urllib.request.Request(f"http://127.0.0.1:{http_port(native)}/v2/models/mlp/infer",
                                      data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(rest, timeout=60) as r:
            answer = json.loads(r.read())
        np.testing.assert_allclose(np.array(answer["outputs"][0]["data"]).reshape(2, -1), want,
                                   rtol=1e-5, atol=1e-6)
        # A model on the (stopped) worker cannot answer: its valid request's deadline passes.
        poly = pb.ModelInferRequest(model_name="poly")
        poly.inputs.add(name="tokens", datatype="INT32", shape=[2, 16])
        poly.raw_input_contents.append(np.zeros((2, 16), np.int32).tobytes())
        poly.inputs.add(name="mask", datatype="BOOL", shape=[2, 16])
        poly.raw_input_contents.append(np.ones((2, 16), np.bool_).tobytes())
        with pytest.raises(grpc.RpcError) as info:
            f.ModelInfer(poly, timeout=1)
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


def test_native_errors_name_the_offending_thing(native: BridgeProcess,
                                              native_repo: Path) -> None:
    """A malformed request and every tripping checkify case: the codes and texts the workers
    give (the check messages: JAX's err.get() text, recorded in the artifact's goldens)."""
    import checked
    from jaxport.artifact import open as open_artifact

    f = stub(native)
    goldens = {g.name: g for g in open_artifact(native_repo / "checked" / "1").goldens()}
    tripping = {name: g for name, g in goldens.items() if g.expected_error}
    assert set(tripping) >= {"check_user", "check_index", "check_nan", "check_div"}, goldens
    with workers_stopped(native):
        with pytest.raises(grpc.RpcError) as info:
            f.ModelInfer(mlp_request(np.zeros((2, 5), np.float32)), timeout=60)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert info.value.details() == "input 'x': expected shape [2, 8], got [2, 5]"
        for name, g in tripping.items():
            req = pb.ModelInferRequest(model_name="checked")
            for key, (dtype, shape) in checked.INPUTS.items():
                value = np.asarray(g.inputs[key], dtype)
                req.inputs.add(name=key, datatype={"float32": "FP32", "int32": "INT32"}[dtype],
                               shape=list(shape))
                req.raw_input_contents.append(value.tobytes())
            with pytest.raises(grpc.RpcError) as info:
                f.ModelInfer(req, timeout=60)
            assert info.value.details() == g.expected_error, name
            assert info.value.code() != grpc.StatusCode.OK


def test_native_statistics_and_metrics(native: BridgeProcess) -> None:
    f = stub(native)
    before = f.ModelStatistics(pb.ModelStatisticsRequest(name="mlp")).model_stats[0]
    x = np.ones((2, 8), np.float32)
    for _ in range(3):
        f.ModelInfer(mlp_request(x), timeout=60)
    with pytest.raises(grpc.RpcError):
        f.ModelInfer(mlp_request(np.ones((2, 5), np.float32)), timeout=60)
    after = f.ModelStatistics(pb.ModelStatisticsRequest(name="mlp")).model_stats[0]
    assert after.inference_stats.success.count - before.inference_stats.success.count == 3
    assert after.inference_stats.fail.count - before.inference_stats.fail.count == 1
    assert after.execution_count - before.execution_count == 3
    samples = native.metrics(per_worker=True)
    key = ("jaxport_inference_success_total", (("model", "mlp"), ("version", "1")))
    assert samples[key] >= 3, sorted(samples)


def test_a_plugin_that_does_not_load_is_one_line(native_repo: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "pjrt_c_api_cpu_plugin.so"
    with BridgeProcess(native_repo, "--pjrt-plugin", str(missing),
                       workdir=tmp_path / "serve") as server:
        assert engine_of(server, "mlp") == "exported"
        off = [r for r in server.log_records() if r.get("msg", "").startswith("native engine off")]
        assert len(off) == 1, server.log_text()
        assert str(missing) in str(off[0]["reason"]), off
        x = np.ones((2, 8), np.float32)
        np.testing.assert_allclose(output(stub(server).ModelInfer(mlp_request(x), timeout=60)),
                                   mlp_reference(x), rtol=1e-5, atol=1e-6)


def test_an_artifact_replaced_in_place_and_reloaded_is_opened_again(
        native: BridgeProcess, native_repo: Path, tmp_path: Path) -> None:
    """RepositoryModelLoad of a version whose directory now holds another export: the native
    engine answers with the new weights (as the workers would), not the ones it opened first."""
    import bridge_models as m
    from jaxport.exporter import export

    f = stub(native)
    x = np.random.default_rng(5).standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_allclose(output(f.ModelInfer(mlp_request(x, "swap"), timeout=60)),
                               mlp_reference(x), rtol=1e-5, atol=1e-6)
    export(m.mlp, m.mlp_params(seed=1), m.MLP_INPUTS, tmp_path / "new", goldens=1, quiet=True,
           name="mlp")
    target = native_repo / "swap" / "1"
    shutil.rmtree(target)
    shutil.copytree(tmp_path / "new", target)
    f.RepositoryModelLoad(pb.RepositoryModelLoadRequest(model_name="swap"), timeout=120)
    assert engine_of(native, "swap") == "native"
    want = np.asarray(jax.jit(m.mlp)(m.mlp_params(seed=1), x))
    np.testing.assert_allclose(output(f.ModelInfer(mlp_request(x, "swap"), timeout=60)), want,
                               rtol=1e-5, atol=1e-6)
