#!/usr/bin/env python3
"""Write the conformance case files (`cases/*.json` + `cases/data/*.npy`) from `models.py`.

Expected outputs are computed by JAX itself, in-process, from the same functions and parameters
that `run.py` exports; the committed files are the language-neutral contract every runner reads.

    .venv/bin/python tests/conformance/make_cases.py           # rewrite cases/
    .venv/bin/python tests/conformance/make_cases.py --check   # exit 1 if cases/ is stale

--check compares float outputs under the tolerance of their case (a value that moved within it,
as XLA's code differs between processors, is listed with how far it moved, not failed) and
everything else byte for byte (expectations.py).

The format is described in tests/conformance/README.md.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import expectations  # noqa: E402
import models  # noqa: E402
from jaxport.protocol import dtypes  # noqa: E402

CASES = HERE / "cases"
JAXPORT = ["jaxport-models"]
#: Feature tags (features.json): what a case needs beyond the core protocol.
VERSIONS = [*JAXPORT, "versions"]
BF16 = [*JAXPORT, "bf16"]
STREAM = [*JAXPORT, "triton-stream"]
CHECKIFY = [*JAXPORT, "checkify"]
BATCHES = [*JAXPORT, "batch-sizes"]
BOOL_NONZERO = [*JAXPORT, "bool-nonzero"]
CLASSIFY = [*JAXPORT, "classification"]
LABELS = [*BATCHES, "classification", "classification-labels"]
FINAL = [*STREAM, "triton-final-response"]
CUDA = ["cuda-shm-cpu"]
GRPC_COMPRESSION = [*JAXPORT, "grpc-compression"]
REST_COMPRESSION = [*JAXPORT, "rest-compression"]
SYSTEM_SHM = [*JAXPORT, "triton-shm"]
SCALARS = [*JAXPORT, "scalar-tensors"]

#: Per-datatype tolerances for comparing float outputs: |got - want| <= atol + rtol * |want|,
#: the ONE tolerance of a float expectation: runners judge servers with it and
#: `make_cases.py --check` judges a recomputation with it (expectations.py). XLA's CPU code
#: differs between processors (FMA contraction, vector width), so a float result may move by an
#: ulp or two from the machine that wrote the case; each margin is a few ulps of its type at the
#: suite's magnitudes (|value| < 100): FP32 ~16 ulp at 1.0, FP64 far more, FP16 ~4, BF16 1-2
#: (8 significant bits). Exact computations (integers, BOOL, the 16 MiB ramp, classification
#: strings) are compared exactly, and their inputs are chosen so they stay exact.
TOLERANCES: dict[str, tuple[float, float]] = {
    "FP64": (1e-12, 1e-12),
    "FP32": (1e-6, 1e-6),
    "FP16": (2e-3, 2e-3),
    "BF16": (1e-2, 1e-2),
}


class Writer:
    """Collects cases and their data files into one directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        (root / "data").mkdir(parents=True, exist_ok=True)
        self.names: set[str] = set()

    def data(self, case: str, tensor: str, array: np.ndarray) -> str:
        """Save `array` as little-endian .npy (BF16 as its <u2 bit patterns); return its path."""
        rel = f"data/{case}.{tensor}.npy"
        if array.dtype == dtypes.by_datatype("BF16").numpy:
            array = array.view("<u2")
        array = np.ascontiguousarray(array.astype(array.dtype.newbyteorder("<")))
        np.save(self.root / rel, array, allow_pickle=False)
        return rel

    def case(self, name: str, body: dict[str, Any]) -> None:
        """Write `cases/<name>.json`, with its basis (`basis`: which kind of rule it checks and
        the texts it cites)."""
        if name in self.names:
            raise ValueError(f"duplicate case {name}")
        self.names.add(name)
        level, sources = basis(name)
        doc = {"name": name, **body, "basis": {"level": level, "sources": sources}}
        text = json.dumps(doc, indent=2, sort_keys=False) + "\n"
        (self.root / f"{name}.json").write_text(text, encoding="utf-8")


#: Which rule each case checks (features.json "levels") and the texts it cites ("sources"),
#: by case name: the first pattern that matches (fnmatch) wins.
BASIS: list[tuple[str, str, list[str]]] = [
    ("health_*", "required", ["v2-grpc-health", "v2-rest-health", "oip-rest-health"]),
    ("error_model_ready_unknown", "required", ["v2-model-ready-unknown", "v2-rest-health"]),
    ("metadata_server", "required", ["v2-server-metadata"]),
    ("metadata_model_bf16", "triton", ["v2-model-metadata", "triton-datatypes"]),
    ("metadata_model_batched", "triton", ["v2-model-metadata", "triton-batching"]),
    ("metadata_model_shapes", "required", ["v2-model-metadata", "v2-shape"]),
    ("metadata_model_*", "required", ["v2-model-metadata"]),
    ("metadata_unknown_model", "implementation-defined", ["v2-errors", "triton-validation"]),
    ("infer_bf16_*", "triton", ["triton-datatypes", "v2-tensor-data"]),
    ("infer_output_shapes_*", "required", ["v2-shape", "v2-tensor-data"]),
    ("infer_batch_*", "triton", ["triton-batching"]),
    ("infer_bool_nonzero_bytes", "implementation-defined", ["triton-bool"]),
    ("infer_16mib", "implementation-defined", ["triton-message-size"]),
    ("infer_grpc_compression_*", "triton", ["triton-compression"]),
    ("rest_infer_*", "triton", ["triton-compression", "triton-binary-data"]),
    ("rest_system_shm_infer", "triton", ["triton-shm"]),
    ("infer_*", "required", ["v2-infer", "v2-tensor-data", "v2-datatypes",
                             "triton-binary-data"]),
    ("sanity_after_errors", "required", ["v2-infer", "v2-tensor-data"]),
    ("stream_final_response", "triton", ["triton-final-response", "triton-stream"]),
    ("stream_*", "triton", ["triton-stream"]),
    ("error_batch_beyond_max", "implementation-defined", ["triton-batching", "v2-errors"]),
    ("error_*", "implementation-defined", ["v2-errors", "triton-validation"]),
    ("check_*", "implementation-defined", ["jaxport-checkify", "v2-errors"]),
    ("classify_bool_refused", "implementation-defined", ["triton-classification", "v2-errors"]),
    ("classify_*", "triton", ["triton-classification"]),
    ("cuda_shm_*", "triton", ["triton-shm", "triton-cuda-shm-cpu"]),
]


def basis(name: str) -> tuple[str, list[str]]:
    """(level, sources) of a case (BASIS); a case no rule names is an error."""
    for pattern, level, sources in BASIS:
        if fnmatch.fnmatchcase(name, pattern):
            return level, sources
    raise ValueError(f"case {name} has no basis: add it to make_cases.BASIS")


def datatype_of(array: np.ndarray) -> str:
    """OIP datatype of a numpy array, from the one dtype table."""
    return dtypes.by_numpy(array.dtype).datatype


def tensor(w: Writer, case: str, name: str, array: np.ndarray) -> dict[str, Any]:
    """An input description whose data is a file."""
    return {
        "name": name,
        "datatype": datatype_of(array),
        "shape": list(array.shape),
        "data": w.data(case, name, array),
    }


def expected(w: Writer, case: str, name: str, array: np.ndarray) -> dict[str, Any]:
    """An expected output with the tolerance of its datatype (exact for ints and BOOL)."""
    dt = datatype_of(array)
    rtol, atol = TOLERANCES.get(dt, (0.0, 0.0))
    return {
        "name": name,
        "datatype": dt,
        "shape": list(array.shape),
        "data": w.data(case, f"expected.{name}", array),
        "rtol": rtol,
        "atol": atol,
    }


def family_input(suffix: str, dtype: np.dtype, seed: int) -> np.ndarray:
    """Deterministic data for a per-dtype model that never overflows its affine map."""
    rng = np.random.default_rng(seed)
    shape = models.DTYPE_SHAPE
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(bool)
    if suffix == "int8":
        return rng.integers(-20, 21, size=shape).astype(dtype)
    if suffix == "uint8":
        return rng.integers(0, 51, size=shape).astype(dtype)
    if suffix == "int32":
        return rng.integers(-(2**20), 2**20, size=shape).astype(dtype)
    if suffix == "int64":
        return rng.integers(-(2**40), 2**40, size=shape).astype(dtype)
    return (rng.standard_normal(size=shape) * 4).astype(dtype)


def infer_case(
    w: Writer,
    name: str,
    description: str,
    model: models.SuiteModel,
    inputs: list[np.ndarray],
    *,
    encoding: str = "raw",
    requested: list[str] | None = None,
    request_id: str = "",
    extra: dict[str, Any] | None = None,
    requires: list[str] | None = None,
    version: str = "",
) -> None:
    """A successful ModelInfer case with outputs computed by JAX."""
    if requires is None:
        requires = BF16 if any(datatype_of(x) == "BF16" for x in inputs) else JAXPORT
    outs = dict(zip(models.output_names(model), models.run_in_process(model, *inputs), strict=True))
    wanted = requested or list(outs)
    request: dict[str, Any] = {
        "model": model.name,
        "id": request_id,
        "encoding": encoding,
        "inputs": [
            tensor(w, name, in_name, arr) for in_name, arr in zip(model.inputs, inputs, strict=True)
        ],
    }
    if requested:
        request["outputs"] = requested
    expect: dict[str, Any] = {
        "code": "OK", "outputs": [expected(w, name, o, outs[o]) for o in wanted]
    }
    if request_id:
        expect["id"] = request_id
        expect["model_name"] = model.name
    if version:
        request["version"] = version
        expect["model_version"] = version
    w.case(name, {"description": description, "requires": requires, "rpc": "ModelInfer",
                  **(extra or {}), "request": request, "expect": expect})


def classified(values: np.ndarray, k: int, batched: bool,
               labels: tuple[str, ...] = ()) -> list[str]:
    """Triton's classification entries, computed here independently of the bridge: per row
    (batched) or over the whole tensor, the k largest values descending (ties: lower index
    first), "value:index[:label]" with the value as C++ std::to_string prints it (%f for floating
    point, the integer otherwise); flattened row-major."""
    rows = values.reshape(values.shape[0], -1) if batched else values.reshape(1, -1)
    floating = values.dtype.kind == "f"
    out = []
    for row in rows:
        for i in sorted(range(row.size), key=lambda j: (-row[j], j))[:k]:
            value = format(float(row[i]), "f") if floating else str(int(row[i]))  # C's %f
            label = labels[i] if i < len(labels) else ""
            out.append(f"{value}:{i}:{label}" if label else f"{value}:{i}")
    return out


def bytes_expected(name: str, shape: list[int], strings: list[str]) -> dict[str, Any]:
    """An expected BYTES output: its elements inline (UTF-8 text), flattened row-major."""
    return {"name": name, "datatype": "BYTES", "shape": shape, "strings": strings}


def error_case(
    w: Writer, name: str, description: str, request: dict[str, Any], code: str,
    contains: list[str], requires: list[str] | None = None, rpc: str = "ModelInfer",
) -> None:
    """A request that must fail with `code` and a message naming `contains`."""
    w.case(name, {"description": description, "requires": JAXPORT if requires is None else requires,
                  "rpc": rpc, "request": request,
                  "expect": {"code": code, "message_contains": contains}})


def write_all(root: Path) -> None:
    """Every case of the suite."""
    w = Writer(root)
    fam = {m.name: m for m in models.suite_models()}

    # --- health and metadata (protocol-only unless they name a suite model) ---
    w.case("health_server_live", {"description": "ServerLive answers live=true", "requires": [],
                                  "rpc": "ServerLive", "request": {},
                                  "expect": {"code": "OK", "live": True}})
    w.case("health_server_ready", {"description": "ServerReady answers ready=true", "requires": [],
                                   "rpc": "ServerReady", "request": {},
                                   "expect": {"code": "OK", "ready": True}})
    w.case("health_model_ready", {"description": "ModelReady for a loaded model",
                                  "requires": JAXPORT, "rpc": "ModelReady",
                                  "request": {"model": "cf_fp32", "version": ""},
                                  "expect": {"code": "OK", "ready": True}})
    w.case("health_model_ready_version", {"description": "ModelReady for an explicit version",
                                          "requires": VERSIONS, "rpc": "ModelReady",
                                          "request": {"model": "cf_multi", "version": "1"},
                                          "expect": {"code": "OK", "ready": True}})
    w.case("metadata_server", {"description": "ServerMetadata has a name and a version",
                               "requires": [], "rpc": "ServerMetadata", "request": {},
                               "expect": {"code": "OK", "nonempty": ["name", "version"]}})
    for mname in ("cf_fp32", "cf_bf16", "cf_multi", "cf_shapes"):
        m = fam[mname]
        outs = models.run_in_process(
            m, *[np.zeros(s.shape, s.dtype) for s in m.inputs.values()]
        )
        w.case(f"metadata_model_{mname.removeprefix('cf_')}", {
            "description": f"ModelMetadata of {mname}: names, OIP datatypes, shapes",
            "requires": {"cf_bf16": BF16, "cf_shapes": SCALARS}.get(mname, JAXPORT),
            "rpc": "ModelMetadata",
            "request": {"model": mname, "version": ""},
            "expect": {
                "code": "OK", "name": mname,
                "inputs": [{"name": n, "datatype": dtypes.by_numpy(s.dtype).datatype,
                            "shape": list(s.shape)} for n, s in m.inputs.items()],
                "outputs": [{"name": n, "datatype": datatype_of(o), "shape": list(o.shape)}
                            for n, o in zip(models.output_names(m), outs, strict=True)],
            },
        })
    m = fam["cf_fp32"]
    w.case("metadata_model_versions", {
        "description": "ModelMetadata lists version 1 of cf_fp32 (a server with versions)",
        "requires": VERSIONS, "rpc": "ModelMetadata",
        "request": {"model": "cf_fp32", "version": "1"},
        "expect": {"code": "OK", "name": "cf_fp32", "versions_include": ["1"],
                   "inputs": [{"name": "data_in", "datatype": "FP32", "shape": [2, 3]}],
                   "outputs": [{"name": "data_out", "datatype": "FP32", "shape": [2, 3]}]},
    })
    error_case(w, "metadata_unknown_model", "ModelMetadata of a model nobody serves",
               {"model": "conformance_no_such_model", "version": ""}, "NOT_FOUND",
               ["conformance_no_such_model"], requires=[], rpc="ModelMetadata")

    # --- every datatype, raw bytes; and typed contents where the protocol has a field ---
    for i, (suffix, dtype) in enumerate(models.DTYPE_FAMILY):
        m = fam[f"cf_{suffix}"]
        x = family_input(suffix, dtype, seed=100 + i)
        dt = dtypes.by_numpy(dtype)
        infer_case(w, f"infer_{suffix}_raw",
                   f"{dt.datatype} in raw_input_contents, little-endian", m, [x])
        if dt.contents_field is not None:
            infer_case(w, f"infer_{suffix}_typed",
                       f"{dt.datatype} in typed contents.{dt.contents_field}", m, [x],
                       encoding="typed")

    # --- IEEE special values survive the wire both ways (NaN, +-inf, -0.0, subnormals) ---
    for suffix in ("fp32", "fp16", "bf16", "fp64"):
        dtype = dict(models.DTYPE_FAMILY)[suffix]
        tiny = float(ml_dtypes.finfo(dtype).smallest_subnormal)
        special = np.array([[np.nan, np.inf, -np.inf], [-0.0, tiny, 1.0]]).astype(dtype)
        infer_case(w, f"infer_{suffix}_special_values",
                   f"{suffix.upper()} NaN, +-inf, -0.0 and a subnormal through the model",
                   fam[f"cf_{suffix}"], [special])

    # --- NaN outputs, in raw and typed contents (a server must not choke encoding them) ---
    nan_in = np.full(models.DTYPE_SHAPE, np.nan, dtype=np.float32)
    infer_case(w, "infer_fp32_nan_outputs", "FP32 NaN in, NaN out (raw contents)",
               fam["cf_fp32"], [nan_in])
    special = np.array([[np.nan, np.inf, -np.inf], [-0.0, 1e-40, 1.0]], dtype=np.float32)
    infer_case(w, "infer_fp32_special_values_typed", "FP32 NaN, +-inf, -0.0 and a subnormal in "
               "typed contents (fp32_contents)", fam["cf_fp32"], [special], encoding="typed")

    # --- ranks: rank-1 and rank-0 (scalar) inputs and outputs keep their shapes ---
    vec = np.array([1.5, -2.0, 0.25, 8.0], dtype=np.float32)
    gain = np.float32(0.5)
    infer_case(w, "infer_output_shapes_raw", "FP32[4] and a scalar FP32[] in raw contents; "
               "outputs FP32[4] and a scalar FP32[] come back with exactly those shapes",
               fam["cf_shapes"], [vec, gain], requires=SCALARS)
    infer_case(w, "infer_output_shapes_typed", "the same in typed contents", fam["cf_shapes"],
               [vec, gain], encoding="typed", requires=SCALARS)

    # --- multiple inputs / outputs, requested subset, id echo ---
    m = fam["cf_multi"]
    rng = np.random.default_rng(7)
    alpha = rng.standard_normal((2, 3)).astype(np.float32)
    beta = rng.integers(-3, 4, size=(3,)).astype(np.int32)
    infer_case(w, "infer_multi_io", "two inputs (FP32, INT32), three outputs (FP32[2,3], "
               "INT32[1], BOOL[2,3]); the request id and model name are echoed", m, [alpha, beta],
               request_id="conformance-multi-1")
    infer_case(w, "infer_version_explicit", "ModelInfer of version 1 named in the request: "
               "the response says model_version 1", m, [alpha, beta], version="1",
               requires=VERSIONS)
    infer_case(w, "infer_multi_requested_subset", "only the requested outputs come back",
               m, [alpha, beta], requested=["greater", "total"])
    infer_case(w, "infer_multi_typed", "several inputs in typed contents", m, [alpha, beta],
               encoding="typed")

    # --- parallel requests ---
    x = family_input("fp32", np.dtype("float32"), seed=300)
    infer_case(w, "infer_parallel", "16 identical requests in flight at once all succeed",
               fam["cf_fp32"], [x], extra={"parallel": 16})

    # --- 16 MiB tensor: generated data (ramp), expected = 2 * ramp + 1, exact in FP32 ---
    n = models.BIG_ELEMENTS
    w.case("infer_16mib", {
        "description": "a 16 MiB FP32 tensor in and out (above gRPC's 4 MiB default limit)",
        "requires": JAXPORT, "rpc": "ModelInfer",
        "request": {"model": "cf_big", "id": "", "encoding": "raw", "inputs": [
            {"name": "big_in", "datatype": "FP32", "shape": [n],
             "ramp": {"start": 0.0, "step": 0.25, "modulo": 4096}}]},
        "expect": {"code": "OK", "outputs": [
            {"name": "big_out", "datatype": "FP32", "shape": [n],
             "ramp": {"start": 1.0, "step": 0.5, "modulo": 4096}, "rtol": 0.0, "atol": 0.0}]},
    })
    _check_big_ramp()

    # --- streaming ---
    reqs, exps = [], []
    for k in range(3):
        xk = family_input("fp32", np.dtype("float32"), seed=400 + k)
        (yk,) = models.run_in_process(fam["cf_fp32"], xk)
        rid = f"stream-{k}"
        reqs.append({"model": "cf_fp32", "id": rid, "encoding": "raw",
                     "inputs": [tensor(w, "stream_infer", f"data_in_{k}", xk)]})
        reqs[-1]["inputs"][0]["name"] = "data_in"
        exps.append({"id": rid, "outputs": [expected(w, "stream_infer", f"data_out_{k}", yk)]})
        exps[-1]["outputs"][0]["name"] = "data_out"
    w.case("stream_infer", {"description": "ModelStreamInfer: three requests on one stream, "
                            "three responses matched by id", "requires": STREAM,
                            "rpc": "ModelStreamInfer", "request": {"requests": reqs},
                            "expect": {"code": "OK", "responses": exps}})

    # a failed request inside a stream: an error_message response, and the stream goes on
    reqs, exps = [], []
    for k in range(3):
        xk = family_input("fp32", np.dtype("float32"), seed=450 + k)
        (yk,) = models.run_in_process(fam["cf_fp32"], xk)
        rid = f"stream-err-{k}"
        spec = tensor(w, "stream_infer_error", f"data_in_{k}", xk)
        spec["name"] = "data_in"
        if k == 1:
            spec["shape"] = [3, 2]
        reqs.append({"model": "cf_fp32", "id": rid, "encoding": "raw", "inputs": [spec]})
        if k == 1:
            exps.append({"id": rid, "error_contains": ["data_in"]})
        else:
            out = expected(w, "stream_infer_error", f"data_out_{k}", yk)
            out["name"] = "data_out"
            exps.append({"id": rid, "outputs": [out]})
    w.case("stream_infer_error", {
        "description": "ModelStreamInfer: the middle request has a wrong shape; it gets an "
                       "error_message naming the input and the stream still answers the third",
        "requires": STREAM, "rpc": "ModelStreamInfer", "request": {"requests": reqs},
        "expect": {"code": "OK", "responses": exps}})

    # --- errors ---
    x = family_input("fp32", np.dtype("float32"), seed=500)
    good = tensor(w, "error_common", "data_in", x)

    def req(*inputs: dict[str, Any], model: str = "cf_fp32", **kw: Any) -> dict[str, Any]:
        return {"model": model, "id": "", "encoding": kw.pop("encoding", "raw"),
                "inputs": list(inputs), **kw}

    # typed contents: its REST form is plain JSON, so the core profile needs no extension
    error_case(w, "error_unknown_model", "ModelInfer on a model nobody serves",
               req(good, model="conformance_no_such_model", encoding="typed"), "NOT_FOUND",
               ["conformance_no_such_model"], requires=[])
    error_case(w, "error_unknown_version", "ModelInfer on a version that does not exist",
               {**req(good), "version": "999"}, "NOT_FOUND", ["999"], requires=VERSIONS)
    w.case("error_model_ready_unknown", {
        "description": "ModelReady of a model nobody serves: NOT_FOUND naming it (KServe, "
                       "jaxport), or ready=false (Triton; REST: a 4xx): the protocol allows both "
                       "(needs no suite model)",
        "requires": [], "rpc": "ModelReady",
        "request": {"model": "conformance_no_such_model", "version": ""},
        "expect": {"code": "NOT_FOUND", "message_contains": ["conformance_no_such_model"],
                   "alternatives": [{"code": "OK", "ready": False}]}})
    error_case(w, "error_metadata_unknown_version", "ModelMetadata of a version that does not "
               "exist", {"model": "cf_fp32", "version": "999"}, "NOT_FOUND", ["999"],
               requires=VERSIONS, rpc="ModelMetadata")
    error_case(w, "error_wrong_shape", "declared shape [3,2] instead of [2,3] (same byte count)",
               req({**good, "shape": [3, 2]}), "INVALID_ARGUMENT", ["data_in"])
    error_case(w, "error_wrong_rank", "declared shape [6] instead of [2,3]",
               req({**good, "shape": [6]}), "INVALID_ARGUMENT", ["data_in"])
    error_case(w, "error_wrong_datatype", "INT32 declared where the model takes FP32 (same bytes)",
               req({**good, "datatype": "INT32"}), "INVALID_ARGUMENT", ["data_in"])
    short = tensor(w, "error_byte_size", "data_in", x.reshape(-1)[:5])
    error_case(w, "error_byte_size_mismatch", "FP32[2,3] declared, 20 bytes sent",
               req({**short, "shape": [2, 3]}), "INVALID_ARGUMENT", ["data_in"])
    error_case(w, "error_missing_input", "cf_multi without its input beta",
               req(tensor(w, "error_missing", "alpha", alpha), model="cf_multi"),
               "INVALID_ARGUMENT", ["beta"])
    error_case(w, "error_extra_input", "an input the model does not have",
               req(good, {**good, "name": "bogus_extra"}), "INVALID_ARGUMENT", ["bogus_extra"])
    error_case(w, "error_duplicate_input", "the same input twice",
               req(good, good), "INVALID_ARGUMENT", ["data_in"])
    error_case(w, "error_unknown_output", "requesting an output the model does not have",
               req(good, outputs=["no_such_output"]), "INVALID_ARGUMENT", ["no_such_output"])
    error_case(w, "error_duplicate_input_typed", "the same input twice, in typed contents",
               req(good, good, encoding="typed"), "INVALID_ARGUMENT", ["data_in"])
    big = tensor(w, "error_shape_beyond_metadata", "data_in",
                 family_input("fp32", np.dtype("float32"), seed=501).reshape(-1)[:4].repeat(3)
                 .reshape(4, 3))
    error_case(w, "error_shape_beyond_metadata", "FP32[4,3] with its 48 bytes (a payload "
               "consistent in itself) where the metadata says FP32[2,3]",
               req(big), "INVALID_ARGUMENT", ["data_in"])
    error_case(w, "error_datatype_beyond_metadata_typed", "FP64 typed contents (fp64_contents) "
               "where the metadata says FP32",
               req(tensor(w, "error_datatype_typed", "data_in", x.astype(np.float64)),
                   encoding="typed"), "INVALID_ARGUMENT", ["data_in"])
    error_case(w, "error_raw_and_typed", "one request carrying both raw and typed contents",
               req(good, encoding="both"), "INVALID_ARGUMENT", [])
    # --- a checkify check tripped inside the exported program (issue 7) ---
    m = fam["cf_check"]
    row = np.array([1.0, -2.0, 0.5, 4.0], dtype=np.float32)
    infer_case(w, "check_passes", "a checkify-validated model with a valid input returns its "
               "outputs only (no check outputs)", m, [np.array([3], np.int32), row],
               requires=CHECKIFY)
    bad = np.array([-2], np.int32)
    message = models.check_message(m, bad, row)
    if not message or "got -2" not in message:
        raise SystemExit(f"make_cases.py: cf_check did not trip in-process ({message!r})")
    error_case(w, "check_tripped", "a checkify.check on an input fires: INVALID_ARGUMENT with "
               "the message JAX's err.get() gives in-process",
               req(tensor(w, "check_tripped", "index", bad), tensor(w, "check_tripped", "row", row),
                   model="cf_check"), "INVALID_ARGUMENT", [message], requires=CHECKIFY)
    write_issue14(w, fam)
    write_issue27(w, fam)
    infer_case(w, "sanity_after_errors", "after every error case the server still answers",
               fam["cf_fp32"], [x])


def write_issue14(w: Writer, fam: dict[str, models.SuiteModel]) -> None:
    """What Triton's own tools rely on (issue 14): partial batches without batching, nonzero
    BOOL bytes, classification with and without labels, triton_final_response, and the CUDA
    shared-memory answers of a server without GPUs."""
    # --- a model exported with batch sizes 1,4: any batch up to 4, only the request's rows ---
    m = fam["cf_batched"]
    cols = models.DTYPE_SHAPE[1]
    w.case("metadata_model_batched", {
        "description": "ModelMetadata of cf_batched (exported with batch sizes 1,4): the batch "
                       "dimension is -1", "requires": BATCHES, "rpc": "ModelMetadata",
        "request": {"model": "cf_batched", "version": ""},
        "expect": {"code": "OK", "name": "cf_batched",
                   "inputs": [{"name": "data_in", "datatype": "FP32", "shape": [-1, cols]}],
                   "outputs": [{"name": "data_out", "datatype": "FP32", "shape": [-1, cols]}]},
    })
    for rows in (1, 2, 3, 4):
        x = family_input("fp32", np.dtype("float32"), seed=600 + rows)
        x = np.resize(x, (rows, cols)) + np.arange(rows, dtype=np.float32)[:, None]
        infer_case(w, f"infer_batch_{rows}_of_4",
                   f"{rows} row(s) to cf_batched (exported sizes 1,4; no dynamic batching "
                   "needed): runs on the smallest program that holds them, padded, and returns "
                   f"exactly {rows} row(s)", m, [x], requires=BATCHES)
    over = tensor(w, "error_batch_beyond_max", "data_in", np.zeros((5, cols), np.float32))
    error_case(w, "error_batch_beyond_max", "5 rows to cf_batched, whose max_batch_size is 4",
               {"model": "cf_batched", "id": "", "encoding": "raw", "inputs": [over]},
               "INVALID_ARGUMENT", ["cf_batched"], requires=BATCHES)

    # --- BOOL: any nonzero raw byte is true (Triton's C++ bool; perf_analyzer's random data) --
    raw = np.array([[0, 1, 2], [255, 7, 0]], np.uint8)
    as_bool = raw.view(np.bool_)  # the bytes as they go on the wire, unnormalised
    (y,) = models.run_in_process(fam["cf_bool"], raw != 0)
    w.case("infer_bool_nonzero_bytes", {
        "description": "cf_bool with raw BOOL bytes 2, 255 and 7: each reads as true (the "
                       "program sees 0/1), so the answer equals the one for 0/1 bytes",
        "requires": BOOL_NONZERO, "rpc": "ModelInfer",
        "request": {"model": "cf_bool", "id": "", "encoding": "raw",
                    "inputs": [tensor(w, "infer_bool_nonzero_bytes", "data_in", as_bool)]},
        "expect": {"code": "OK",
                   "outputs": [expected(w, "infer_bool_nonzero_bytes", "data_out", y)]},
    })

    # --- classification: BYTES "value:index" entries instead of the tensor ---
    for suffix, k in (("fp32", 4), ("int64", 3)):
        m = fam[f"cf_{suffix}"]
        x = family_input(suffix, m.inputs["data_in"].dtype, seed=700 + k)
        if suffix == "fp32":
            # Multiples of 1/8 under 8 in magnitude: x * scale + shift is exact in FP32 with or
            # without FMA, so the %f strings, compared exactly, are the same on every processor.
            x = (np.random.default_rng(700 + k).integers(-63, 64, size=x.shape) / 8
                 ).astype(np.float32)
        (y,) = models.run_in_process(m, x)
        w.case(f"classify_{suffix}", {
            "description": f"classification of cf_{suffix}'s {suffix.upper()} output "
                           f"(class_count {k}; no batch dimension, so over the whole tensor): "
                           "BYTES value:index, descending",
            "requires": CLASSIFY, "rpc": "ModelInfer",
            "request": {"model": m.name, "id": "", "encoding": "raw",
                        "inputs": [tensor(w, f"classify_{suffix}", "data_in", x)],
                        "outputs": ["data_out"], "classification": {"data_out": k}},
            "expect": {"code": "OK", "outputs": [
                bytes_expected("data_out", [k], classified(y, k, batched=False))]},
        })
    m = fam["cf_classes"]
    x = np.array([[0.5, 2.25, -1.0, 3.0, 0.125], [7.0, 6.0, 5.0, 4.0, 3.0],
                  [-1.0, -2.0, 1.5, 4.5, 0.25]], np.float32)
    scores, votes = (dict(zip(models.output_names(m), models.run_in_process(m, x), strict=True))[n]
                     for n in ("scores", "votes"))
    w.case("classify_labels", {
        "description": "classification of cf_classes (3 rows): scores carries labels from the "
                       "artifact (value:index:label), votes (INT64) has none (value:index); one "
                       "row of entries per batch row",
        "requires": LABELS, "rpc": "ModelInfer",
        "request": {"model": "cf_classes", "id": "", "encoding": "raw",
                    "inputs": [tensor(w, "classify_labels", "x", x)],
                    "outputs": ["scores", "votes"], "classification": {"scores": 3, "votes": 2}},
        "expect": {"code": "OK", "outputs": [
            bytes_expected("scores", [3, 3],
                           classified(scores, 3, batched=True, labels=m.labels["scores"])),
            bytes_expected("votes", [3, 2], classified(votes, 2, batched=True))]},
    })
    xb = family_input("bool", np.dtype("bool"), seed=710)
    error_case(w, "classify_bool_refused", "classification of a BOOL output: INVALID_ARGUMENT "
               "naming the type (as Triton)",
               {"model": "cf_bool", "id": "", "encoding": "raw",
                "inputs": [tensor(w, "classify_bool_refused", "data_in", xb)],
                "outputs": ["data_out"], "classification": {"data_out": 1}},
               "INVALID_ARGUMENT", ["BOOL"], requires=CLASSIFY)

    # --- triton_final_response when the stream request asks for it, and only then ---
    reqs, exps = [], []
    for k in range(3):
        xk = family_input("fp32", np.dtype("float32"), seed=800 + k)
        (yk,) = models.run_in_process(fam["cf_fp32"], xk)
        rid = f"final-{k}"
        spec = tensor(w, "stream_final_response", f"data_in_{k}", xk)
        spec["name"] = "data_in"
        req: dict[str, Any] = {"model": "cf_fp32", "id": rid, "encoding": "raw", "inputs": [spec]}
        out = expected(w, "stream_final_response", f"data_out_{k}", yk)
        out["name"] = "data_out"
        # every (only, so final) response says so, whether or not the request opted in to
        # empty final responses (which only a decoupled model would send)
        exp: dict[str, Any] = {"id": rid, "outputs": [out],
                               "parameters": {"triton_final_response": True}}
        if k != 1:
            req["parameters"] = {"triton_enable_empty_final_response": True}
        reqs.append(req)
        exps.append(exp)
    w.case("stream_final_response", {
        "description": "ModelStreamInfer: every (only, final) response carries "
                       "triton_final_response=true, for requests 0 and 2, which set "
                       "triton_enable_empty_final_response, and for request 1, which does not "
                       "(the opt-in asks only for an extra empty response from a decoupled "
                       "model; jaxport's are not decoupled, so no response more)",
        "requires": FINAL, "rpc": "ModelStreamInfer", "request": {"requests": reqs},
        "expect": {"code": "OK", "responses": exps}})

    # --- CUDA shared memory on a server without GPUs (Triton built without GPU support) ---
    w.case("cuda_shm_status_empty", {
        "description": "CudaSharedMemoryStatus of every region: none", "requires": CUDA,
        "rpc": "CudaSharedMemoryStatus", "request": {"name": ""},
        "expect": {"code": "OK", "regions": []}})
    for name, region in (("cuda_shm_unregister_all", ""),
                         ("cuda_shm_unregister_unknown", "conformance_never_registered")):
        w.case(name, {
            "description": "CudaSharedMemoryUnregister " + (
                f"of '{region}', never registered" if region else "of every region") +
                ": OK (perf_analyzer's clean-up calls it)", "requires": CUDA,
            "rpc": "CudaSharedMemoryUnregister", "request": {"name": region},
            "expect": {"code": "OK"}})
    error_case(w, "cuda_shm_register_refused", "CudaSharedMemoryRegister without a usable "
               "GPU: INVALID_ARGUMENT (Triton's message depends on its build: 'GPUs not "
               "supported' naming the region, or 'invalid args')",
               {"name": "conformance_gpu_region", "device_id": 0, "byte_size": 64},
               "INVALID_ARGUMENT", [], requires=CUDA, rpc="CudaSharedMemoryRegister")
    error_case(w, "cuda_shm_status_unknown", "CudaSharedMemoryStatus of a region never "
               "registered: NOT_FOUND naming it", {"name": "conformance_gpu_region"},
               "NOT_FOUND", ["conformance_gpu_region"], requires=CUDA,
               rpc="CudaSharedMemoryStatus")


def write_issue27(w: Writer, fam: dict[str, models.SuiteModel]) -> None:
    """Transport features (issue 27): gRPC message compression, REST Content-Encoding /
    Accept-Encoding, and Triton's system shared memory over REST. Each is an ordinary cf_multi
    inference whose answer must not change; the case's transport keys say how to send it
    (README.md, "Case format")."""
    rng = np.random.default_rng(2700)
    alpha = rng.standard_normal((2, 3)).astype(np.float32)
    beta = rng.integers(-3, 4, size=(3,)).astype(np.int32)
    m = fam["cf_multi"]
    for algorithm in ("gzip", "deflate"):
        infer_case(w, f"infer_grpc_compression_{algorithm}",
                   f"ModelInfer sent with gRPC message compression {algorithm} (grpc-encoding; "
                   "deflate is a zlib stream, as gRPC core writes it): the normal answer",
                   m, [alpha, beta], requires=GRPC_COMPRESSION,
                   extra={"transport": "grpc", "grpc_compression": algorithm})
    for name, content, accept, binary in (
            ("rest_infer_gzip_json", "gzip", "gzip", False),
            ("rest_infer_deflate_binary", "deflate", "deflate", True),
            ("rest_infer_gzip_in_deflate_out", "gzip", "deflate;q=0.9, gzip;q=0.5", True)):
        answer = "deflate" if accept.startswith("deflate") else "gzip"
        infer_case(w, name,
                   f"REST infer whose body is Content-Encoding {content} "
                   f"({'binary tensors' if binary else 'JSON tensors'}), with Accept-Encoding "
                   f"'{accept}': the answer comes back Content-Encoding {answer} and decodes "
                   "to the normal outputs", m, [alpha, beta],
                   encoding="raw" if binary else "typed", requires=REST_COMPRESSION,
                   extra={"transport": "rest",
                          "rest_compression": {"content_encoding": content,
                                               "accept_encoding": accept,
                                               "expect_content_encoding": answer}})
    infer_case(w, "rest_system_shm_infer",
               "REST system shared memory (same host): register one /dev/shm region, infer "
               "with both inputs and every output in it (shared_memory_region / _byte_size / "
               "_offset), read the outputs from the region, unregister it", m, [alpha, beta],
               requires=SYSTEM_SHM,
               extra={"transport": "rest", "system_shared_memory": True})


def _check_big_ramp() -> None:
    """The ramp expectation of infer_16mib is what JAX computes (on a prefix covering a period)."""
    m = models.by_name("cf_big")
    i = np.arange(models.BIG_ELEMENTS, dtype=np.int64)
    x = (0.0 + 0.25 * (i % 4096)).astype(np.float32)
    (y,) = models.run_in_process(m, x)
    want = (1.0 + 0.5 * (i % 4096)).astype(np.float32)
    if not np.array_equal(y, want):
        raise SystemExit("make_cases.py: cf_big does not compute 2x+1 exactly on the ramp")


def main(argv: list[str] | None = None) -> int:
    """Write cases/ (default) or check it is current (`--check`): expectations.py's rule, float
    outputs under their tolerance, everything else byte for byte. Writing keeps a committed float
    expectation that moved only within its tolerance, so regenerating on another processor
    changes only what really changed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if cases/ is stale")
    parser.add_argument("--cases", type=Path, default=CASES,
                        help="the committed case directory (default: %(default)s)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="jaxport-cases-") as tmp:
        fresh = Path(tmp) / "cases"
        write_all(fresh)
        count = len(list(fresh.glob("*.json")))
        result = expectations.compare_trees(fresh, args.cases) if args.cases.is_dir() else None
        if args.check:
            if result is None:
                print(f"make_cases.py --check: no case directory {args.cases}", file=sys.stderr)
                return 1
            rc, lines = expectations.report(result)
            if lines:
                print("\n".join(lines), file=sys.stderr if rc else sys.stdout)
            if rc == 0:
                print(f"make_cases.py --check: {count} cases up to date")
            return rc
        for name in result.moved_files if result else []:
            shutil.copy2(args.cases / name, fresh / name)
        if args.cases.exists():
            shutil.rmtree(args.cases)
        shutil.copytree(fresh, args.cases)
    kept = f" (kept {len(result.moved_files)} committed float expectations that moved within " \
        "their tolerance)" if result and result.moved_files else ""
    print(f"make_cases.py: wrote {count} cases to {args.cases}{kept}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
