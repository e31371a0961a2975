"""The suite's data and its judging, shared by every Python runner (gRPC and REST): case files,
the feature table and --features profiles, tensor data (.npy files and ramps), the datatype
table (numpy only: BF16 travels as its 16-bit patterns and is compared as float), output and
error comparison, and the wire request / response of a case (the generated stubs of `_proto`).

The runner's datatype and wire code is its own, not jaxport's codecs: the oracle must not share
code with a server it judges.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from jaxport_conformance._proto import pb

PACKAGE = Path(__file__).resolve().parent
#: The cases: inside the installed wheel (data/cases), else the jaxport tree's
#: tests/conformance/cases beside this package.
DEFAULT_CASES = (PACKAGE / "data" / "cases" if (PACKAGE / "data" / "cases").is_dir()
                 else PACKAGE.parent / "cases")
CUDA_RPCS = ("CudaSharedMemoryStatus", "CudaSharedMemoryRegister", "CudaSharedMemoryUnregister")
KNOWN_RPCS = ("ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata",
              "ModelInfer", "ModelStreamInfer", *CUDA_RPCS)
CALL_TIMEOUT_S = 60.0
CLASSIFICATION = "classification"  # Triton's requested-output parameter (top-k count)


class CaseFailure(AssertionError):
    """The server's answer differs from what the case expects."""


class ServerError(Exception):
    """A call the server refused: the gRPC status name (`NOT_FOUND`) and its message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code, self.message = code, message

    @classmethod
    def from_rpc_error(cls, exc: Any) -> ServerError:
        """A grpc.RpcError of a blocking or aio call."""
        return cls(exc.code().name, exc.details() or "")


# --- datatypes -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Datatype:
    """One OIP datatype: its numpy dtype (BF16: the <u2 bit patterns), bytes per element, and
    the InferTensorContents field of typed contents (None: raw only)."""

    name: str
    numpy: np.dtype
    itemsize: int
    contents_field: str | None


DATATYPES = {d.name: d for d in (
    Datatype("BOOL", np.dtype("bool"), 1, "bool_contents"),
    Datatype("UINT8", np.dtype("<u1"), 1, "uint_contents"),
    Datatype("UINT16", np.dtype("<u2"), 2, "uint_contents"),
    Datatype("UINT32", np.dtype("<u4"), 4, "uint_contents"),
    Datatype("UINT64", np.dtype("<u8"), 8, "uint64_contents"),
    Datatype("INT8", np.dtype("<i1"), 1, "int_contents"),
    Datatype("INT16", np.dtype("<i2"), 2, "int_contents"),
    Datatype("INT32", np.dtype("<i4"), 4, "int_contents"),
    Datatype("INT64", np.dtype("<i8"), 8, "int64_contents"),
    Datatype("FP16", np.dtype("<f2"), 2, None),
    Datatype("BF16", np.dtype("<u2"), 2, None),
    Datatype("FP32", np.dtype("<f4"), 4, "fp32_contents"),
    Datatype("FP64", np.dtype("<f8"), 8, "fp64_contents"),
)}
#: numpy dtype names of arrays a client hands back ("bfloat16": ml_dtypes, when a client has it).
BY_NUMPY_NAME = {"bool": "BOOL", "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32",
                 "uint64": "UINT64", "int8": "INT8", "int16": "INT16", "int32": "INT32",
                 "int64": "INT64", "float16": "FP16", "bfloat16": "BF16", "float32": "FP32",
                 "float64": "FP64", "object": "BYTES"}
FLOATS = ("FP16", "BF16", "FP32", "FP64")


def datatype(name: str) -> Datatype:
    """The row of an OIP datatype name (ValueError naming it when unknown)."""
    if name not in DATATYPES:
        raise ValueError(f"datatype {name!r} is not one the suite carries: {sorted(DATATYPES)}")
    return DATATYPES[name]


@dataclass(frozen=True)
class Decoded:
    """An output as the wire said it: its datatype and values (BF16 widened to float32)."""

    datatype: str
    array: np.ndarray


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    """BF16 bit patterns (<u2) as float32 values (exact: BF16 is float32's upper half)."""
    return (bits.astype("<u4") << 16).view("<f4")


def values_of(got: Any) -> tuple[str, np.ndarray]:
    """(datatype, values) of an output: a Decoded, or a numpy array a client returned."""
    if isinstance(got, Decoded):
        return got.datatype, got.array
    array = np.asarray(got)
    name = BY_NUMPY_NAME.get(array.dtype.name)
    if name is None:
        raise CaseFailure(f"output of numpy dtype {array.dtype} has no OIP datatype")
    return name, array


# --- the feature table -----------------------------------------------------------------------


def features_file(cases: Path) -> Path:
    """The suite's one feature table: `features.json` beside the case directory (every runner,
    Python, Go and Java, reads the same file)."""
    return Path(cases).resolve().parent / "features.json"


def load_features(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(features, extensions) of a feature table: what a case may need beyond the core protocol
    (its "requires" list) with a description each, and the ServerMetadata.extensions entries
    that claim a feature on their own. A case needing a feature the server does not claim is
    NOT-APPLICABLE."""
    table = json.loads(Path(path).read_text(encoding="utf-8"))
    return dict(table["features"]), dict(table["extensions"])


def profile_text(text: str) -> str:
    """--features as given, or, when it names an existing file, that file's feature names
    (separated by commas, spaces or lines; `#` starts a comment), joined by commas."""
    candidate = Path(text.strip()) if text.strip() else None
    if candidate is None or text.strip() in ("all", "core") or not candidate.is_file():
        return text
    words = []
    for line in candidate.read_text(encoding="utf-8").splitlines():
        words += line.split("#", 1)[0].replace(",", " ").split()
    return ",".join(words) or "core"


def parse_features(text: str, features: dict[str, str]) -> set[str] | None:
    """--features: "all" (None: every case applies), "core" or "" (nothing beyond the core
    protocol), a comma list of feature names, or a file of them (profile_text). Unknown names
    are an error naming them."""
    text = profile_text(text).strip()
    if text == "all":
        return None
    names = {f.strip() for f in text.split(",") if f.strip() and f.strip() != "core"}
    unknown = names - set(features)
    if unknown:
        raise ValueError(f"unknown feature(s) {sorted(unknown)}; known: core, all, "
                         f"{', '.join(features)}")
    return names


def claim_extensions(claimed: set[str], extensions: list[str],
                     features: dict[str, str], extension_features: dict[str, str]) -> None:
    """Add the features a server's ServerMetadata.extensions claim (by the table's extension
    names, or a feature's own name)."""
    claimed |= {extension_features[x] for x in extensions if x in extension_features}
    claimed |= {x for x in extensions if x in features}


def missing_features(case: dict[str, Any], claimed: set[str] | None) -> list[str]:
    """The features a case needs that the server does not claim ([] = the case applies)."""
    if claimed is None:
        return []
    return [f for f in case.get("requires", []) if f not in claimed]


# --- case files and tensor data --------------------------------------------------------------


#: A case's optional "transport": the one protocol it has a meaning on (gRPC message compression,
#: REST Content-Encoding, REST shared-memory registration); absent, every transport.
TRANSPORT_NAMES = {"grpc": "gRPC", "rest": "REST"}


def other_transport(case: dict[str, Any], transport: str) -> str | None:
    """Why a case does not apply to a runner speaking `transport` ("grpc" or "rest"), or None."""
    only = case.get("transport")
    if only is None or only == transport:
        return None
    return (f"{TRANSPORT_NAMES.get(only, only)} only (this runner speaks "
            f"{TRANSPORT_NAMES[transport]})")


def load_cases(directory: Path) -> list[dict[str, Any]]:
    """Every `*.json` case in `directory`, sorted by name, with its directory attached."""
    directory = Path(directory)
    cases = []
    for path in sorted(directory.glob("*.json")):
        case = json.loads(path.read_text(encoding="utf-8"))
        if case.get("name") != path.stem:
            raise ValueError(f"{path}: name {case.get('name')!r} does not match the file name")
        if case.get("rpc") not in KNOWN_RPCS:
            raise ValueError(f"{path}: unknown rpc {case.get('rpc')!r}; known: {KNOWN_RPCS}")
        if case.get("transport", "grpc") not in TRANSPORT_NAMES:
            raise ValueError(f"{path}: unknown transport {case['transport']!r}; known: "
                             f"{sorted(TRANSPORT_NAMES)}")
        case["_dir"] = directory
        cases.append(case)
    if not cases:
        raise ValueError(f"no case files (*.json) in {directory}")
    return cases


def read_npy_bytes(path: Path) -> bytes:
    """The little-endian element bytes of a C-order .npy file."""
    array = np.load(path, allow_pickle=False)
    if array.dtype.byteorder == ">":
        raise ValueError(f"{path}: big-endian data; the suite stores little-endian")
    return np.ascontiguousarray(array).tobytes()


def ramp(spec: dict[str, Any], datatype_name: str, count: int) -> bytes:
    """Generated data: element i is start + step * (i % modulo), in the datatype."""
    i = np.arange(count, dtype=np.int64) % int(spec["modulo"])
    values = float(spec["start"]) + float(spec["step"]) * i
    if datatype_name == "BF16":  # round to nearest even, as a BF16 conversion does
        bits = values.astype("<f4").view("<u4").astype(np.uint64)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        return bits.astype("<u2").tobytes()
    return values.astype(datatype(datatype_name).numpy).tobytes()


def tensor_bytes(case: dict[str, Any], t: dict[str, Any]) -> bytes:
    """The bytes a case tensor describes (a data file, or a ramp of shape x datatype)."""
    if "data" in t:
        return read_npy_bytes(case["_dir"] / t["data"])
    if "ramp" in t:
        return ramp(t["ramp"], t["datatype"], math.prod(t["shape"]))
    raise ValueError(f"case {case['name']}: tensor {t['name']} has neither data nor ramp")


def as_values(datatype_name: str, shape: list[int], data: bytes) -> np.ndarray:
    """Bytes as the declared datatype and shape (BF16 as float32; raises if the byte count
    disagrees)."""
    array = np.frombuffer(data, dtype=datatype(datatype_name).numpy).reshape(shape)
    return bf16_to_float32(array) if datatype_name == "BF16" else array


def malformed(case: dict[str, Any], req: dict[str, Any]) -> bool:
    """A request the case builds wrong on purpose (its outputs are never compared)."""
    if req["encoding"] not in ("raw", "typed"):
        return True
    names = [t["name"] for t in req["inputs"]]
    if len(set(names)) != len(names):
        return True
    return any(len(tensor_bytes(case, t)) != math.prod(t["shape"])
               * datatype(t["datatype"]).itemsize for t in req["inputs"])


# --- comparisons -----------------------------------------------------------------------------


def compare_strings(want: dict[str, Any], got: Any) -> None:
    """A BYTES output: shape, then every element equal to the expected UTF-8 text."""
    name = want["name"]
    kind, array = values_of(got)
    if kind != "BYTES":
        raise CaseFailure(f"output {name}: datatype {kind}, expected BYTES")
    if list(array.shape) != list(want["shape"]):
        raise CaseFailure(f"output {name}: shape {list(array.shape)}, expected {want['shape']}")
    elements = [bytes(e).decode("utf-8", "replace") for e in array.ravel()]
    for k, (g, e) in enumerate(zip(elements, want["strings"], strict=True)):
        if g != e:
            raise CaseFailure(f"output {name}: flat index {k}: got {g!r}, expected {e!r}")


def compare_tensor(want: dict[str, Any], got: Any, want_bytes: bytes) -> None:
    """Datatype, shape, then values: exact for integers/BOOL, within rtol/atol for floats."""
    name = want["name"]
    kind, array = values_of(got)
    if kind != want["datatype"]:
        raise CaseFailure(f"output {name}: datatype {kind}, expected {want['datatype']}")
    if list(array.shape) != list(want["shape"]):
        raise CaseFailure(f"output {name}: shape {list(array.shape)}, expected {want['shape']}")
    expected = as_values(want["datatype"], want["shape"], want_bytes)
    if want["datatype"] in FLOATS:
        a, e = array.astype(np.float64), expected.astype(np.float64)
        ok = np.isclose(a, e, rtol=want["rtol"], atol=want["atol"], equal_nan=True)
        if not ok.all():
            k = int(np.argmin(ok.ravel()))
            raise CaseFailure(
                f"output {name}: {int((~ok).sum())} elements outside rtol={want['rtol']} "
                f"atol={want['atol']}; first at flat index {k}: got {a.ravel()[k]!r}, "
                f"expected {e.ravel()[k]!r}"
            )
    elif not np.array_equal(array, expected):
        k = int(np.argmax(array.ravel() != expected.ravel()))
        raise CaseFailure(f"output {name}: flat index {k}: got {array.ravel()[k]!r}, "
                          f"expected {expected.ravel()[k]!r}")


def compare_outputs(case: dict[str, Any], expect: dict[str, Any], outputs: dict[str, Any],
                    response_id: str) -> None:
    """Exactly the expected outputs, each matching; the id echoed when the case says so."""
    want = {o["name"]: o for o in expect["outputs"]}
    if set(outputs) != set(want):
        raise CaseFailure(f"outputs {sorted(outputs)}, expected {sorted(want)}")
    for name, spec in want.items():
        if spec["datatype"] == "BYTES":
            compare_strings(spec, outputs[name])
        else:
            compare_tensor(spec, outputs[name], tensor_bytes(case, spec))
    if "id" in expect and response_id != expect["id"]:
        raise CaseFailure(f"response id {response_id!r}, expected {expect['id']!r}")


def compare_parameters(what: str, want: dict[str, Any], got: dict[str, Any]) -> None:
    """`parameters` (each present with that value) and `parameters_absent` of an expectation."""
    for key, value in want.get("parameters", {}).items():
        if key not in got or got[key] != value or type(got[key]) is not type(value):
            raise CaseFailure(f"{what}: parameter {key!r} is {got.get(key, '(absent)')!r}, "
                              f"expected {value!r}")
    for key in want.get("parameters_absent", []):
        if key in got:
            raise CaseFailure(f"{what}: parameter {key!r} is {got[key]!r}, expected none")


def judge(run_one: Any, case: dict[str, Any]) -> None:
    """Run a case through `run_one(case)`, and where the protocol allows several answers
    (`expect.alternatives`: each a whole expectation, judged with its own call; read-only RPCs
    only), pass when any one of them holds. The failure names what each expected."""
    try:
        run_one(case)
        return
    except CaseFailure as first:
        alternatives = case["expect"].get("alternatives", [])
        if not alternatives:
            raise
        failures = [str(first)]
    for alternative in alternatives:
        try:
            run_one({**case, "expect": alternative})
            return
        except CaseFailure as exc:
            failures.append(str(exc))
    raise CaseFailure(" | or: ".join(failures))


def check_error(expect: dict[str, Any], code: str, message: str) -> None:
    """The status code the case expects, and a message naming what it must name."""
    if code != expect["code"]:
        raise CaseFailure(f"status {code} ({message!r}), expected {expect['code']}")
    for part in expect.get("message_contains", []):
        if part not in message:
            raise CaseFailure(f"status message {message!r} does not mention {part!r}")


# --- the gRPC wire form ----------------------------------------------------------------------


def to_parameters(values: dict[str, Any], target: Any) -> None:
    """Fill a `map<string, InferParameter>` from a case's bool / integer / string values."""
    for key, value in values.items():
        if isinstance(value, bool):
            target[key].bool_param = value
        elif isinstance(value, int):
            target[key].int64_param = value
        elif isinstance(value, str):
            target[key].string_param = value
        else:
            raise ValueError(f"parameter {key!r}: {value!r} is not a bool, integer or string")


def from_parameters(params: Any) -> dict[str, Any]:
    """Plain values of a `map<string, InferParameter>` (unset values skipped)."""
    out = {}
    for key, param in params.items():
        which = param.WhichOneof("parameter_choice")
        if which is not None:
            out[key] = getattr(param, which)
    return out


def request_message(case: dict[str, Any], req: dict[str, Any]) -> Any:
    """The wire request a case describes, exactly (raw, typed or both encodings, request
    parameters, requested outputs and their classification counts)."""
    msg = pb.ModelInferRequest(model_name=req["model"], model_version=req.get("version", ""),
                               id=req.get("id", ""))
    to_parameters(req.get("parameters", {}), msg.parameters)
    for t in req["inputs"]:
        data = tensor_bytes(case, t)
        tensor = msg.inputs.add(name=t["name"], datatype=t["datatype"], shape=t["shape"])
        if req["encoding"] in ("raw", "both"):
            msg.raw_input_contents.append(data)
        if req["encoding"] in ("typed", "both"):
            row = datatype(t["datatype"])
            if row.contents_field is None:
                raise ValueError(f"case {case['name']}: {t['datatype']} has no typed contents")
            values = np.frombuffer(data[: len(data) // row.itemsize * row.itemsize],
                                   dtype=row.numpy)
            getattr(tensor.contents, row.contents_field).extend(values.tolist())
    classes = req.get("classification", {})
    for name in req.get("outputs", []):
        out = msg.outputs.add(name=name)
        if name in classes:
            out.parameters[CLASSIFICATION].int64_param = int(classes[name])
    return msg


def split_bytes_elements(raw: bytes) -> list[bytes]:
    """The elements of raw BYTES contents (each a 4-byte little-endian length, then the bytes);
    CaseFailure when the lengths overrun the data."""
    out, i = [], 0
    while i < len(raw):
        if i + 4 > len(raw):
            raise CaseFailure(f"BYTES contents: {len(raw) - i} trailing bytes, not a length")
        n = int.from_bytes(raw[i:i + 4], "little")
        if i + 4 + n > len(raw):
            raise CaseFailure(f"BYTES contents: element of {n} bytes overruns the data")
        out.append(raw[i + 4:i + 4 + n])
        i += 4 + n
    return out


def object_array(elements: list[bytes], shape: list[int]) -> np.ndarray:
    """BYTES elements as an object array of the given shape."""
    array = np.empty(len(elements), dtype=object)
    array[:] = elements
    return array.reshape(shape)


def decode_response(resp: Any) -> dict[str, Decoded]:
    """Every output of a ModelInferResponse (raw or typed contents) by name; CaseFailure when
    the response is inconsistent (a byte count or element count not matching the shape)."""
    outputs = {}
    raw = list(resp.raw_output_contents)
    if raw and len(raw) != len(resp.outputs):
        raise CaseFailure(f"{len(raw)} raw_output_contents for {len(resp.outputs)} outputs")
    for i, out in enumerate(resp.outputs):
        shape = list(out.shape)
        count = math.prod(shape)
        if out.datatype == "BYTES":
            elements = (split_bytes_elements(raw[i]) if raw
                        else list(out.contents.bytes_contents))
            if len(elements) != count:
                raise CaseFailure(f"output {out.name}: {len(elements)} BYTES elements for "
                                  f"shape {shape}")
            outputs[out.name] = Decoded("BYTES", object_array(elements, shape))
            continue
        row = datatype(out.datatype)
        if raw:
            if len(raw[i]) != count * row.itemsize:
                raise CaseFailure(f"output {out.name}: {len(raw[i])} bytes for {out.datatype} "
                                  f"shape {shape}")
            array = as_values(out.datatype, shape, raw[i])
        else:
            if row.contents_field is None:
                raise CaseFailure(f"output {out.name}: {out.datatype} in typed contents")
            values = list(getattr(out.contents, row.contents_field))
            if len(values) != count:
                raise CaseFailure(f"output {out.name}: {len(values)} typed values for shape "
                                  f"{shape}")
            array = np.array(values, dtype=row.numpy).reshape(shape)
        outputs[out.name] = Decoded(out.datatype, array)
    return outputs
