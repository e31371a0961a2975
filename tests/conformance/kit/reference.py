"""The conformance suite's models in plain numpy: what a server team serves to run the cases that
need `jaxport-models` (and `bf16`, `batch-sizes`, `checkify`, `classification-labels`) without
jaxport. Each `ReferenceModel` gives the OIP signature (names, datatypes, shapes; -1 is the
batch dimension), `max_batch_size`, class labels by output, and `compute(inputs) -> outputs`
(numpy arrays by name; BF16 as its uint16 bit patterns on both sides), raising `CheckFailed`
where the jaxport model's runtime check fires. The definitions mirror tests/conformance/models.py
(the JAX originals the cases' expected outputs come from); the kit's own test
(tests/conformance/test_kit.py) runs every inference case through them. numpy only.

    from reference import MODELS
    MODELS["cf_multi"].run({"alpha": a, "beta": b})  # {"total": ..., "positives": ..., ...}

`run` validates the inputs against the signature first (`InvalidInput` naming the input, as
a server must answer a wrong name, datatype or shape; the shapes only when asked, see `run`)
and then computes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

BIG_ELEMENTS = 4 * 1024 * 1024
CLASS_LABELS = ("ant", "bee", "cat", "dog", "eel")


class InvalidInput(ValueError):
    """The request does not fit the model's signature (`ReferenceModel.validate`): the server
    answers INVALID_ARGUMENT (HTTP 400) with this message, which names the offending input."""


class CheckFailed(InvalidInput):
    """A runtime check of the model fired: the server answers INVALID_ARGUMENT (HTTP 400) with
    this message."""


@dataclass(frozen=True)
class Tensor:
    name: str
    datatype: str
    shape: tuple[int, ...]


@dataclass(frozen=True)
class ReferenceModel:
    name: str
    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]
    compute: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]
    #: 0: fixed shapes; else dimension 0 of every tensor is the batch (-1 in the signature)
    max_batch_size: int = 0
    labels: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def validate(self, inputs: dict[str, np.ndarray], shapes: bool = True) -> None:
        """InvalidInput naming the input unless `inputs` are exactly the signature's: every name
        once, the datatype (BF16: uint16 bit patterns), and with `shapes` the shape (a -1 takes
        1 to max_batch_size rows)."""
        unknown = sorted(set(inputs) - {t.name for t in self.inputs})
        if unknown:
            raise InvalidInput(f"model {self.name!r} has no input(s) {unknown}")
        for t in self.inputs:
            if t.name not in inputs:
                raise InvalidInput(f"model {self.name!r}: missing input {t.name!r}")
            array = np.asarray(inputs[t.name])
            want = np.dtype("<u2") if t.datatype == "BF16" else np.dtype(NUMPY[t.datatype])
            if array.dtype != want:
                raise InvalidInput(f"model {self.name!r} input {t.name!r}: dtype {array.dtype}, "
                                   f"expected {t.datatype}")
            if not shapes:
                continue
            fits = len(array.shape) == len(t.shape) and all(
                g == w or (w == -1 and 1 <= g <= self.max_batch_size)
                for g, w in zip(array.shape, t.shape, strict=False))
            if not fits:
                raise InvalidInput(f"model {self.name!r} input {t.name!r}: shape "
                                   f"{list(array.shape)}, expected {list(t.shape)}")

    def run(self, inputs: dict[str, np.ndarray], check_shapes: bool = True
            ) -> dict[str, np.ndarray]:
        """validate, then compute: what an adapter calls per request. The KServe and MLServer
        adapters pass check_shapes=False: checking a request's shapes against the model's
        metadata is the server's job, which the suite's wrong-shape cases measure (numpy's own
        broadcasting error is then what reaches the server, as a model's would)."""
        self.validate(inputs, shapes=check_shapes)
        return self.compute(inputs)


# --- BF16 without ml_dtypes: uint16 bit patterns, float32 arithmetic, round to nearest even ---


def bf16_to_float32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, "<u2").astype("<u4") << 16).view("<f4")


def float32_to_bf16(values: np.ndarray) -> np.ndarray:
    bits = np.asarray(values, "<f4").view("<u4").astype(np.uint64)
    nan = np.isnan(np.asarray(values, "<f4"))
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")
    return np.where(nan, (bits >> 16).astype("<u2") | 0x40, rounded).astype("<u2")


# --- the models ------------------------------------------------------------------------------

NUMPY = {"FP32": np.float32, "FP64": np.float64, "FP16": np.float16, "INT8": np.int8,
         "INT32": np.int32, "INT64": np.int64, "UINT8": np.uint8, "BOOL": np.bool_}


def _affine_params(datatype: str) -> tuple[np.ndarray, np.ndarray]:
    """scale and shift of cf_<dtype> (models._family_params), as float32 for BF16."""
    if datatype in ("INT8", "INT32", "INT64", "UINT8"):
        scale, shift = np.array([2, -3, 1]), np.array([5, 7, -11])
        if datatype == "UINT8":
            scale, shift = np.array([2, 3, 1]), np.array([5, 7, 11])
        if datatype == "INT64":
            shift = np.array([5_000_000_000, -7, 2**40 + 3])
        return scale.astype(NUMPY[datatype]), shift.astype(NUMPY[datatype])
    scale = np.linspace(0.5, 1.5, 3)
    shift = np.array([0.25, -1.0, 3.0])
    if datatype == "BF16":
        return (bf16_to_float32(float32_to_bf16(scale.astype(np.float32))),
                bf16_to_float32(float32_to_bf16(shift.astype(np.float32))))
    return scale.astype(NUMPY[datatype]), shift.astype(NUMPY[datatype])


def _affine(datatype: str) -> Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """data_out = data_in * scale + shift in the input's own dtype (small ints wrap)."""
    scale, shift = _affine_params(datatype)

    def compute(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        x = inputs["data_in"]
        if datatype == "BF16":  # each operation rounded to BF16, as XLA does
            product = bf16_to_float32(float32_to_bf16(bf16_to_float32(x) * scale))
            return {"data_out": float32_to_bf16(product + shift)}
        with np.errstate(over="ignore"):
            return {"data_out": (x * scale + shift).astype(x.dtype)}
    return compute


def _logic(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"data_out": np.logical_xor(inputs["data_in"], np.array([True, False, True]))}


def _multi(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    alpha, beta = inputs["alpha"], inputs["beta"]
    total = alpha * np.array([1.0, -2.0, 0.5], np.float32) + beta.astype(np.float32)
    return {"total": total.astype(np.float32),
            "positives": np.array([np.sum(total > 0)], dtype=np.int32),
            "greater": alpha > beta.astype(np.float32)}


def _big(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {"big_out": inputs["big_in"] * np.float32(2.0) + np.float32(1.0)}


def _checked(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    index = int(inputs["index"][0])
    if index < 0:  # JAX's checkify message, as err.get() gives it
        raise CheckFailed(f"index needs to be non-negative, got {index} (`check` failed)")
    gain = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    return {"scaled": (inputs["row"] * gain * np.float32(index)).astype(np.float32)}


def _shapes(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    v = inputs["vec_in"]
    return {"vec_out": v * np.float32(2.0),
            "sum_out": np.array(np.sum(v) * inputs["gain"], dtype=np.float32)}


def _classes(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    scores = inputs["x"] * np.array([1.0, 2.0, 0.5, 1.0, 3.0], np.float32)
    return {"scores": scores, "votes": (scores * np.float32(10)).astype(np.int64)}


def _family() -> list[ReferenceModel]:
    out = []
    for suffix in ("fp32", "fp64", "fp16", "bf16", "int8", "int32", "int64", "uint8", "bool"):
        dt = suffix.upper()
        out.append(ReferenceModel(
            f"cf_{suffix}", (Tensor("data_in", dt, (2, 3)),), (Tensor("data_out", dt, (2, 3)),),
            _logic if dt == "BOOL" else _affine(dt)))
    return out


MODELS: dict[str, ReferenceModel] = {m.name: m for m in [
    *_family(),
    ReferenceModel("cf_multi",
                   (Tensor("alpha", "FP32", (2, 3)), Tensor("beta", "INT32", (3,))),
                   (Tensor("total", "FP32", (2, 3)), Tensor("positives", "INT32", (1,)),
                    Tensor("greater", "BOOL", (2, 3))), _multi),
    ReferenceModel("cf_big", (Tensor("big_in", "FP32", (BIG_ELEMENTS,)),),
                   (Tensor("big_out", "FP32", (BIG_ELEMENTS,)),), _big),
    ReferenceModel("cf_check", (Tensor("index", "INT32", (1,)), Tensor("row", "FP32", (4,))),
                   (Tensor("scaled", "FP32", (4,)),), _checked),
    ReferenceModel("cf_shapes", (Tensor("vec_in", "FP32", (4,)), Tensor("gain", "FP32", ())),
                   (Tensor("sum_out", "FP32", ()), Tensor("vec_out", "FP32", (4,))), _shapes),
    ReferenceModel("cf_batched", (Tensor("data_in", "FP32", (-1, 3)),),
                   (Tensor("data_out", "FP32", (-1, 3)),), _affine("FP32"), max_batch_size=4),
    ReferenceModel("cf_classes", (Tensor("x", "FP32", (-1, 5)),),
                   (Tensor("scores", "FP32", (-1, 5)), Tensor("votes", "INT64", (-1, 5))),
                   _classes, max_batch_size=4, labels={"scores": CLASS_LABELS}),
]}
