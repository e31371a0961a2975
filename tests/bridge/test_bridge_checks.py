"""checkify checks through a real bridge: a tripped check is one gRPC status whose message is
the text `err.get()` gives in JAX for the same inputs; passing inputs return normal outputs;
check outputs never show up as outputs (ModelInfer, ModelMetadata, ModelConfig).

Status codes (jaxport.artifact.checks.STATUS): user and index checks INVALID_ARGUMENT,
nan and div FAILED_PRECONDITION. Both engines are covered: `exported` (Exported.call) and `pjrt`
(raw model.mlirbc bound from the manifest, what a C++ consumer does).
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import grpc
import jax
import numpy as np
import pytest
from bridge_helpers import rpc_error
from jax.experimental import checkify
from jaxport.artifact import checks as checks_mod
from jaxport.protocol import codecs
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from support.bridge import BridgeProcess

MODELS = Path(__file__).resolve().parents[1] / "models"
if str(MODELS) not in sys.path:
    sys.path.insert(0, str(MODELS))
import checked  # noqa: E402

KINDS = ["user", "index", "nan", "div"]
PARAMS = checked.init(jax.random.key(0))
INPUT_NAMES = list(checked.INPUTS)
CASES = checked.check_goldens()
STATUS = {
    "user": grpc.StatusCode.INVALID_ARGUMENT,
    "index": grpc.StatusCode.INVALID_ARGUMENT,
    "nan": grpc.StatusCode.FAILED_PRECONDITION,
    "div": grpc.StatusCode.FAILED_PRECONDITION,
}


def jax_message(args: tuple[np.ndarray, ...]) -> str | None:
    """What JAX says in-process for these inputs."""
    cf = checkify.checkify(checked.predict, errors=checkify.all_checks)
    err, _ = jax.jit(cf)(PARAMS, *args)
    return err.get()


def named(args: tuple[np.ndarray, ...]) -> dict[str, np.ndarray]:
    return dict(zip(INPUT_NAMES, (np.asarray(a) for a in args), strict=True))


@pytest.fixture(scope="module")
def checked_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from jaxport.exporter import export

    repo = tmp_path_factory.mktemp("checked-repo")
    inputs = {k: jax.ShapeDtypeStruct(s, d) for k, (d, s) in checked.INPUTS.items()}
    export(
        checked.predict,
        PARAMS,
        inputs,
        repo / "checked" / "1",
        quiet=True,
        name="checked",
        checks=KINDS,
        check_goldens=CASES,
        source_function="checked:predict",
    )
    return repo


@pytest.fixture(scope="module", params=["exported", "pjrt"])
def checked_bridge(request, checked_repo: Path) -> Iterator[BridgeProcess]:
    with BridgeProcess(checked_repo, "--engine", request.param) as b:
        yield b


@pytest.fixture(scope="module")
def checked_stub(checked_bridge: BridgeProcess) -> Iterator[pb_grpc.GRPCInferenceServiceStub]:
    with checked_bridge.channel() as channel:
        yield pb_grpc.GRPCInferenceServiceStub(channel)


@pytest.mark.parametrize("kind", KINDS)
def test_tripped_check_is_a_status_with_jaxs_message(checked_stub, kind):
    args = CASES[kind]
    expected = jax_message(args)
    assert expected
    request = codecs.build_infer_request("checked", named(args))
    err = rpc_error(checked_stub.ModelInfer, request, timeout=30)
    assert err.code() == STATUS[kind]
    assert err.details() == expected
    assert STATUS[kind].name == checks_mod.STATUS[kind]


def test_passing_input_returns_outputs_only(checked_stub):
    args = CASES["pass"]
    assert jax_message(args) is None
    response = checked_stub.ModelInfer(
        codecs.build_infer_request("checked", named(args)), timeout=30
    )
    got = codecs.decode_infer_response(response)
    want = checked.predict(PARAMS, *args)
    assert list(got) == ["picked", "y"]  # no check outputs
    np.testing.assert_array_equal(got["picked"], np.asarray(want["picked"]))
    np.testing.assert_allclose(got["y"], np.asarray(want["y"]), rtol=1e-6, atol=1e-6)


def test_check_outputs_cannot_be_requested(checked_stub):
    request = codecs.build_infer_request(
        "checked", named(CASES["pass"]), outputs=["check.1.user.predicate"]
    )
    err = rpc_error(checked_stub.ModelInfer, request, timeout=30)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "check.1.user.predicate" in err.details()


def test_first_failing_check_wins_like_jax(checked_stub):
    """Several checks trip at once: the status is the one JAX reports (lowest code)."""
    x = np.array([-1.0, 2.0, 0.5, 4.0], np.float32)
    args = (x, np.array([1, 100, 3], np.int32), np.float32(0.0))
    expected = jax_message(args)
    err = rpc_error(
        checked_stub.ModelInfer, codecs.build_infer_request("checked", named(args)), timeout=30
    )
    assert err.details() == expected
    assert err.code() == STATUS["index"]  # the gather comes before the log and the division


def test_metadata_and_config_list_no_check_outputs(checked_stub):
    meta = checked_stub.ModelMetadata(pb.ModelMetadataRequest(name="checked"))
    assert [t.name for t in meta.outputs] == ["picked", "y"]
    config = checked_stub.ModelConfig(pb.ModelConfigRequest(name="checked")).config
    assert [o.name for o in config.output] == ["picked", "y"]


def test_server_survives_and_counts_failures(checked_bridge, checked_stub):
    """Each tripped check fails its request with its status; ModelStatistics counts each one
    in fail (not in inference_count, execution_count nor success, as Triton counts) and
    jaxport_inference_failure_total counts it under its code; the next request succeeds and
    is counted as one success, one inference, one execution."""

    def stats() -> pb.ModelStatistics:
        (s,) = checked_stub.ModelStatistics(
            pb.ModelStatisticsRequest(name="checked", version="1"), timeout=30).model_stats
        return s

    def failures() -> dict[str, float]:
        return {dict(labels)["code"]: v for (name, labels), v in checked_bridge.metrics().items()
                if name == "jaxport_inference_failure_total" and ("model", "checked") in labels}

    s0, f0 = stats(), failures()
    for kind in KINDS:
        err = rpc_error(
            checked_stub.ModelInfer,
            codecs.build_infer_request("checked", named(CASES[kind])),
            timeout=30,
        )
        assert err.code() == STATUS[kind], (kind, err.details())
    s1, f1 = stats(), failures()
    assert s1.inference_stats.fail.count == s0.inference_stats.fail.count + len(KINDS)
    assert s1.inference_stats.success.count == s0.inference_stats.success.count
    assert (s1.inference_count, s1.execution_count) == (s0.inference_count, s0.execution_count)
    by_code = {code.name: sum(1 for k in KINDS if STATUS[k] == code) for code in STATUS.values()}
    assert {c: d for c in f1 if (d := f1[c] - f0.get(c, 0))} == by_code  # 2 and 2

    assert checked_bridge.alive()
    checked_stub.ModelInfer(codecs.build_infer_request("checked", named(CASES["pass"])), timeout=30)
    s2 = stats()
    assert s2.inference_stats.fail.count == s1.inference_stats.fail.count
    assert s2.inference_stats.success.count == s1.inference_stats.success.count + 1
    assert (s2.inference_count, s2.execution_count) == (s1.inference_count + 1,
                                                        s1.execution_count + 1)


# Run in its own process: tritonclient's generated `inference.*` protobuf symbols clash with
# ours. Plain json/numpy: the golden cases of the artifact (inputs and expected failure).
TRITON_SCRIPT = """
import json, sys
from pathlib import Path
import numpy as np
import tritonclient.grpc as tc
from tritonclient.utils import InferenceServerException
url, artifact = sys.argv[1], Path(sys.argv[2])
manifest = json.loads((artifact / "manifest.json").read_text())
types = {i["name"]: i["dtype"]["datatype"] for i in manifest["inputs"]}
client = tc.InferenceServerClient(url)
seen = {}
for case in manifest["goldens"]:
    inputs = []
    for name, rel in case["inputs"].items():
        value = np.load(artifact / rel)
        t = tc.InferInput(name, list(value.shape), types[name])
        t.set_data_from_numpy(value)
        inputs.append(t)
    try:
        result = client.infer("checked", inputs)
        seen[case["name"]] = ["OK", sorted(o.name for o in result.get_response().outputs)]
    except InferenceServerException as e:
        seen[case["name"]] = [e.status(), e.message()]
client.close()
print(json.dumps(seen))
"""


def test_tritonclient_sees_the_message(checked_bridge, checked_repo: Path):
    """Every golden of the artifact through tritonclient: expected status and message."""
    from jaxport.artifact import manifest as manifest_io

    artifact = checked_repo / "checked" / "1"
    proc = subprocess.run(
        [sys.executable, "-c", TRITON_SCRIPT, checked_bridge.address, str(artifact)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    goldens = manifest_io.load(artifact).goldens
    assert {g.expected_check for g in goldens} >= {"", *KINDS}
    for g in goldens:
        if g.expected_check:
            status = f"StatusCode.{STATUS[g.expected_check].name}"
            assert seen[g.name] == [status, g.expected_error], g.name
        else:
            assert seen[g.name] == ["OK", ["picked", "y"]], g.name


def test_jaxport_infer_surfaces_the_message_unchanged(checked_bridge, tmp_path: Path):
    cli = [str(Path(sys.executable).parent / "jaxport"), "infer"]
    for kind in ("user", "nan"):
        flags = []
        for name, value in named(CASES[kind]).items():
            np.save(tmp_path / f"{kind}.{name}.npy", value)
            flags += ["--input", f"{name}=@{tmp_path / f'{kind}.{name}.npy'}"]
        proc = subprocess.run(
            [*cli, "--url", checked_bridge.address, "--model", "checked", *flags],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 1
        assert proc.stderr.strip() == (
            f"jaxport infer: error: {STATUS[kind].name}: {jax_message(CASES[kind])}"
        )


# ---- dynamic batching: a failing request fails alone ---------------------------------------


@pytest.fixture(scope="module")
def batched_checked_bridge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BridgeProcess]:
    from jaxport.exporter import export

    repo = tmp_path_factory.mktemp("checked-batched-repo")
    inputs = {k: jax.ShapeDtypeStruct(s, d) for k, (d, s) in checked.BATCHED_INPUTS.items()}
    export(
        checked.predict_batched,
        PARAMS,
        inputs,
        repo / "checkedb" / "1",
        quiet=True,
        checks=KINDS,
        check_goldens=checked.check_goldens_batched(),
        batch_sizes=[1, 4],
    )
    # A long queue delay so concurrent one-row requests share a 4-row batch.
    with BridgeProcess(
        repo, "--batching", "--max-queue-delay-us", "200000"
    ) as b:
        yield b


def test_batched_failing_request_fails_alone(batched_checked_bridge):
    from concurrent.futures import ThreadPoolExecutor

    from jaxport.client import InferenceClient, InferenceServerError

    rows = {k: tuple(np.asarray(a)[None] for a in v) for k, v in CASES.items()}
    plan = [
        "pass",
        "user",
        "pass",
        "pass",
        "pass",
        "nan",
        "pass",
        "pass",
        "index",
        "pass",
        "pass",
        "div",
        "pass",
        "pass",
        "pass",
        "pass",
    ]

    def call(kind: str):
        with InferenceClient(batched_checked_bridge.address, timeout=60) as client:
            try:
                return client.infer("checkedb", named(rows[kind]))
            except InferenceServerError as exc:
                return exc

    with ThreadPoolExecutor(len(plan)) as pool:
        results = list(pool.map(call, plan))
    cf = jax.jit(checkify.checkify(checked.predict_batched, errors=checkify.all_checks))
    for kind, res in zip(plan, results, strict=True):
        err, want = cf(PARAMS, *rows[kind])
        if kind == "pass":
            assert not isinstance(res, Exception), res
            np.testing.assert_array_equal(res["picked"], np.asarray(want["picked"]))
            np.testing.assert_allclose(res["y"], np.asarray(want["y"]), rtol=1e-6, atol=1e-6)
        else:
            assert isinstance(res, InferenceServerError), kind
            assert (res.code, res.message) == (STATUS[kind].name, err.get())
    assert batched_checked_bridge.alive()
