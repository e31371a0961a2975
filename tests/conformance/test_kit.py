"""The model kit (tests/conformance/kit, shipped in the jaxport-conformance wheel) against the
cases: the numpy reference models compute every expected output of every inference and stream
case of the suite models (classification aside: the top-k strings are the server's job, not the
model's), their signatures are the metadata cases', a tripped check raises the case's message,
and the generated Triton python-backend repository declares those signatures and computes the
same outputs through its model.py (run here with a stand-in for Triton's
triton_python_backend_utils; test_triton.py, slow, loads it into a real Triton)."""

from __future__ import annotations

import ctypes
import importlib.util
import json
import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
for _p in (HERE, HERE / "kit"):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import make_triton_repo  # noqa: E402
import reference  # noqa: E402
from jaxport_conformance import suite  # noqa: E402

CASES = suite.load_cases(suite.DEFAULT_CASES)


def feeds(case: dict[str, Any], req: dict[str, Any]) -> dict[str, np.ndarray]:
    """A request's inputs as numpy arrays (BF16: uint16 bit patterns, as the kit takes them)."""
    return {t["name"]: np.frombuffer(suite.tensor_bytes(case, t),
                                     suite.datatype(t["datatype"]).numpy).reshape(t["shape"])
            for t in req["inputs"]}


def decoded(model: reference.ReferenceModel, outputs: dict[str, np.ndarray],
            wanted: list[str] | None) -> dict[str, suite.Decoded]:
    types_ = {t.name: t.datatype for t in model.outputs}
    return {n: suite.Decoded(types_[n], suite.as_values(types_[n], list(np.shape(a)),
                                                        np.ascontiguousarray(a).tobytes()))
            for n, a in outputs.items() if not wanted or n in wanted}


def infer_cases() -> list[dict[str, Any]]:
    return [c for c in CASES if c["rpc"] == "ModelInfer" and c["expect"]["code"] == "OK"
            and "jaxport-models" in c["requires"] and not c["request"].get("classification")]


@pytest.mark.parametrize("case", infer_cases(), ids=lambda c: c["name"])
def test_reference_models_give_the_expected_outputs(case: dict[str, Any]) -> None:
    req = case["request"]
    model = reference.MODELS[req["model"]]
    got = decoded(model, model.run(feeds(case, req)), req.get("outputs"))
    suite.compare_outputs(case, {"outputs": case["expect"]["outputs"]}, got, "")


def test_reference_streams_and_checks() -> None:
    streams = [c for c in CASES if c["rpc"] == "ModelStreamInfer"]
    assert streams
    for case in streams:
        reqs = {r["id"]: r for r in case["request"]["requests"]}
        for want in case["expect"]["responses"]:
            r = reqs[want["id"]]
            model = reference.MODELS[r["model"]]
            if "error_contains" in want:
                with pytest.raises(reference.InvalidInput) as info:
                    model.run(feeds(case, r))
                for part in want["error_contains"]:
                    assert part in str(info.value)
                continue
            suite.compare_outputs(case, {"outputs": want["outputs"]},
                                  decoded(model, model.run(feeds(case, r)), None), "")
    (tripped,) = [c for c in CASES if c["name"] == "check_tripped"]
    with pytest.raises(reference.CheckFailed) as info:
        reference.MODELS["cf_check"].run(feeds(tripped, tripped["request"]))
    for part in tripped["expect"]["message_contains"]:
        assert part in str(info.value)


def test_reference_signatures_are_the_metadata_cases() -> None:
    metadata = [c for c in CASES if c["rpc"] == "ModelMetadata" and c["expect"]["code"] == "OK"]
    assert len(metadata) >= 5
    for case in metadata:
        model = reference.MODELS[case["expect"]["name"]]
        for kind in ("inputs", "outputs"):
            got = [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
                   for t in getattr(model, kind)]
            assert got == case["expect"][kind], case["name"]
    # A request off the signature is refused naming the input (what a server must say).
    infer = [c for c in CASES if c["rpc"] == "ModelInfer" and c["request"]["model"] in
             reference.MODELS and not suite.malformed(c, c["request"])
             and c["expect"]["code"] == "INVALID_ARGUMENT" and c["name"] != "check_tripped"
             and not c["request"].get("outputs")]  # outputs and classification: the server's
    assert len(infer) >= 4
    for case in infer:
        model = reference.MODELS[case["request"]["model"]]
        with pytest.raises(reference.InvalidInput) as info:
            model.run(feeds(case, case["request"]))
        assert any(part in str(info.value) for part in case["expect"]["message_contains"]), (
            case["name"], str(info.value))
    # Shapes are left to the server by the KServe/MLServer adapters: numpy's own error, or
    # (a shape numpy broadcasts) an answer the server should never have let through.
    by_name = {c["name"]: c for c in infer}
    for name in ("error_wrong_shape", "error_wrong_rank"):
        case = by_name[name]
        with pytest.raises(ValueError, match="broadcast"):
            reference.MODELS["cf_fp32"].run(feeds(case, case["request"]), check_shapes=False)
    case = by_name["error_shape_beyond_metadata"]
    out = reference.MODELS["cf_fp32"].run(feeds(case, case["request"]), check_shapes=False)
    assert out["data_out"].shape == (4, 3)
    served = {c["request"]["model"] for c in CASES if c["rpc"] == "ModelInfer"
              and "jaxport-models" in c["requires"]}
    assert served <= set(reference.MODELS)


#: DLPack: the type code of a DLManagedTensor behind a capsule (dlpack.h), kDLUInt and kDLBfloat.
_CODE_OFFSET, _KDL_UINT, _KDL_BFLOAT = 20, 1, 4
_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_pointer.restype, _pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]


def _code(capsule: Any) -> ctypes.c_uint8:
    return ctypes.c_uint8.from_address(_pointer(capsule, b"dltensor") + _CODE_OFFSET)


class _PbUtils(types.ModuleType):
    """What model.py uses of Triton's triton_python_backend_utils, with the python backend's
    DLPack semantics: a BF16 tensor's capsule says kDLBfloat (and has no numpy view), a
    response tensor is taken from a capsule; responses of output tensors or a TritonError."""

    class Tensor:
        def __init__(self, name: str, array: np.ndarray, datatype: str) -> None:
            # a copy: Triton's tensors are writable, DLPack 0.x exports only those
            self.name, self.array, self.datatype = name, np.array(array), datatype

        def __dlpack__(self, **kw: Any) -> Any:
            if self.datatype == "BF16":
                raise TypeError("BF16 has no numpy dtype: use to_dlpack()")  # as numpy says
            return self.array.__dlpack__(**kw)

        def __dlpack_device__(self) -> tuple[int, int]:
            return self.array.__dlpack_device__()

        def to_dlpack(self) -> Any:
            capsule = self.array.__dlpack__()
            if self.datatype == "BF16":
                _code(capsule).value = _KDL_BFLOAT
            return capsule

        @classmethod
        def from_dlpack(cls, name: str, capsule: Any) -> Any:
            code = _code(capsule)
            datatype = "BF16" if code.value == _KDL_BFLOAT else ""
            code.value = _KDL_UINT if datatype else code.value

            class Producer:
                def __dlpack__(self, **_: Any) -> Any:
                    return capsule

                def __dlpack_device__(self) -> tuple[int, int]:
                    return (1, 0)

            array = np.array(np.from_dlpack(Producer()))
            return cls(name, array, datatype or suite.BY_NUMPY_NAME[array.dtype.name])

    class InferenceResponse:
        def __init__(self, output_tensors: list | None = None, error: Any = None) -> None:
            self.output_tensors, self.error = output_tensors or [], error

    class TritonError:
        INVALID_ARG = "INVALID_ARG"

        def __init__(self, message: str, code: str = "INTERNAL") -> None:
            self.message, self.code = message, code

    class Request:
        def __init__(self, inputs: dict[str, np.ndarray], types_: dict[str, str]) -> None:
            self.inputs, self.types = inputs, types_

    def get_input_tensor_by_name(self, request: Any, name: str) -> Any:
        if name not in request.inputs:
            return None
        return self.Tensor(name, request.inputs[name], request.types[name])


def _triton_model(repo: Path, name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"triton_{name}", repo / name / "1" / "model.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model = module.TritonPythonModel()
    model.initialize({"model_name": name})
    return model


def test_triton_repository(tmp_path: Path) -> None:
    """The generated repository's configs, and its model.py run against a stand-in for the
    python backend's utilities (the real Triton: test_triton.py, slow)."""
    repo = tmp_path / "triton"
    make_triton_repo.write_repository(repo, site_packages="/nowhere/site-packages")
    # Models with a rank-0 tensor are left out: Triton has no scalar tensors in a non-batching
    # model (the cases needing them require scalar-tensors).
    assert set(make_triton_repo.LEFT_OUT) == {"cf_shapes"}
    assert sorted(p.name for p in repo.iterdir()) == sorted(set(reference.MODELS) - {"cf_shapes"})
    config = (repo / "cf_batched" / "config.pbtxt").read_text()
    assert 'backend: "python"' in config and "max_batch_size: 4" in config
    assert 'name: "data_in"' in config and "data_type: TYPE_FP32" in config
    assert "dims: [ 3 ]" in config  # the batch dimension is implicit with max_batch_size
    assert "dims: [ 2, 3 ]" in (repo / "cf_fp16" / "config.pbtxt").read_text()
    assert "data_type: TYPE_BF16" in (repo / "cf_bf16" / "config.pbtxt").read_text()
    assert "'/nowhere/site-packages'" in (repo / "cf_fp32" / "1" / "model.py").read_text()
    assert 'label_filename: "scores.labels.txt"' in (repo / "cf_classes" / "config.pbtxt"
                                                        ).read_text()
    assert (repo / "cf_classes" / "scores.labels.txt").read_text().split() == list(
        reference.CLASS_LABELS)
    with pytest.raises(ValueError, match="tensor 'gain' has rank 0"):
        make_triton_repo.config(reference.MODELS["cf_shapes"])
    pb_utils = _PbUtils("triton_python_backend_utils")
    sys.modules["triton_python_backend_utils"] = pb_utils
    try:
        for case in [c for c in infer_cases()
                     if c["request"]["model"] in ("cf_multi", "cf_fp16", "cf_bf16", "cf_batched")]:
            req = case["request"]
            name = req["model"]
            model = _triton_model(repo, name)
            types_ = {t["name"]: t["datatype"] for t in req["inputs"]}
            (response,) = model.execute([pb_utils.Request(feeds(case, req), types_)])
            assert response.error is None
            got = {t.name: suite.Decoded(t.datatype, suite.as_values(
                t.datatype, list(t.array.shape), t.array.tobytes()))
                for t in response.output_tensors
                if not req.get("outputs") or t.name in req["outputs"]}  # Triton keeps those
            suite.compare_outputs(case, {"outputs": case["expect"]["outputs"]}, got, "")
        (tripped,) = [c for c in CASES if c["name"] == "check_tripped"]
        (response,) = _triton_model(repo, "cf_check").execute([pb_utils.Request(
            feeds(tripped, tripped["request"]), {"index": "INT32", "row": "FP32"})])
        assert "index needs to be non-negative, got -2" in response.error.message
        assert response.error.code == "INVALID_ARG"
    finally:
        del sys.modules["triton_python_backend_utils"]


def test_mlserver_settings_and_kit_copy(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    import mlserver_runtime
    from jaxport_conformance import cli

    mlserver_runtime.write_settings(tmp_path / "settings", grpc_port=9001)
    assert json.loads((tmp_path / "settings" / "settings.json").read_text())["grpc_port"] == 9001
    for name, model in reference.MODELS.items():
        doc = json.loads((tmp_path / "settings" / name / "model-settings.json").read_text())
        assert doc["implementation"] == "mlserver_runtime.SuiteRuntime"
        assert doc["inputs"] == mlserver_runtime.signature(model.inputs)
    assert cli.main(["--write-kit", str(tmp_path / "kit")]) == 0
    assert {p.name for p in (tmp_path / "kit").iterdir()} == {
        "reference.py", "kserve_server.py", "mlserver_runtime.py", "make_triton_repo.py"}
    assert cli.main(["--write-kit", str(tmp_path / "kit")]) == 2  # never overwrites
    assert f"{tmp_path / 'kit'} already has" in capsys.readouterr().err
