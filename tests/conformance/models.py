"""The conformance suite's own models: tiny JAX functions with fixed, deterministic parameters.

Each `SuiteModel` is exported by `run.py` into `<repository>/<name>/1/` and served by the bridge;
`make_cases.py` runs the same functions in-process under JAX to write the expected outputs of the
cases that say `"requires": ["jaxport-models"]`. Names of inputs and outputs are deliberately
distinctive (`data_in`, `alpha`...) so an error message that names one can be asserted on.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax.experimental import checkify

#: Rows of the per-dtype family: model name suffix, numpy dtype.
DTYPE_FAMILY: tuple[tuple[str, np.dtype], ...] = (
    ("fp32", np.dtype("float32")),
    ("fp64", np.dtype("float64")),
    ("fp16", np.dtype("float16")),
    ("bf16", np.dtype(ml_dtypes.bfloat16)),
    ("int8", np.dtype("int8")),
    ("int32", np.dtype("int32")),
    ("int64", np.dtype("int64")),
    ("uint8", np.dtype("uint8")),
    ("bool", np.dtype("bool")),
)

#: Shape of `data_in` / `data_out` in the per-dtype models.
DTYPE_SHAPE = (2, 3)
#: Elements of the 16 MiB FP32 tensor of `cf_big`.
BIG_ELEMENTS = 4 * 1024 * 1024
#: Batch sizes `cf_batched` and `cf_classes` are exported with: max_batch_size 4, so a batch of
#: 2 or 3 runs on the 4-row program, padded.
BATCH_SIZES = (1, 4)
#: Class labels of `cf_classes`'s `scores` output (one per class along its last dimension).
CLASS_LABELS = ("ant", "bee", "cat", "dog", "eel")


@dataclass(frozen=True)
class SuiteModel:
    """A function `fn(params, *inputs)`, its params and its input signature."""

    name: str
    fn: Callable[..., Any]
    params: dict[str, np.ndarray]
    inputs: dict[str, jax.ShapeDtypeStruct]
    output_names: list[str] = field(default_factory=list)
    goldens: int = 2
    #: checkify error sets exported as check outputs (`export(checks=...)`), e.g. ("user",).
    checks: tuple[str, ...] = ()
    #: exported batch sizes (`export(batch_sizes=...)`): dimension 0 of every input is the
    #: batch, `inputs` give one row; () for a fixed-shape model.
    batch_sizes: tuple[int, ...] = ()
    #: classification labels by output (`export(labels=...)`): line i names class i.
    labels: dict[str, tuple[str, ...]] = field(default_factory=dict)
    #: exported under `jax.enable_x64` (a 64-bit output computed from 32-bit leaves, which the
    #: exporter's own x64 rule, 64-bit leaves, does not see).
    x64: bool = False


def _affine(params: dict[str, jax.Array], data_in: jax.Array) -> dict[str, jax.Array]:
    """data_out = data_in * scale + shift, in the input's own dtype (wraps for small ints)."""
    return {"data_out": data_in * params["scale"] + params["shift"]}


def _logic(params: dict[str, jax.Array], data_in: jax.Array) -> dict[str, jax.Array]:
    """data_out = data_in XOR mask (BOOL has no arithmetic)."""
    return {"data_out": jnp.logical_xor(data_in, params["mask"])}


def _multi(
    params: dict[str, jax.Array], alpha: jax.Array, beta: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Two inputs of different dtypes, three outputs of different dtypes and ranks (positives
    is INT32[1], not a scalar: a Triton serves cf_multi too, and Triton has no rank-0 tensors
    in a non-batching model; cf_shapes holds the suite's scalars)."""
    total = alpha * params["gain"] + beta.astype(jnp.float32)
    positives = jnp.sum(total > 0, dtype=jnp.int32).reshape(1)
    greater = alpha > beta.astype(jnp.float32)
    return total, positives, greater


def _big(params: dict[str, jax.Array], big_in: jax.Array) -> dict[str, jax.Array]:
    """Elementwise big_out = big_in * 2 + 1 (exact in FP32 for the suite's ramp data)."""
    return {"big_out": big_in * params["two"] + params["one"]}


def _checked(
    params: dict[str, jax.Array], index: jax.Array, row: jax.Array
) -> dict[str, jax.Array]:
    """A model validating its input with checkify: a negative index (INT32[1]) is the caller's
    mistake."""
    checkify.check(index[0] >= 0, "index needs to be non-negative, got {}", index[0])
    return {"scaled": row * params["gain"] * index[0].astype(jnp.float32)}


def _shapes(params: dict[str, jax.Array], vec_in: jax.Array, gain: jax.Array
            ) -> dict[str, jax.Array]:
    """The suite's rank-0 tensors: a rank-1 and a scalar input, a rank-1 and a scalar output;
    their shapes must survive the wire as-is."""
    return {"vec_out": vec_in * params["two"], "sum_out": jnp.sum(vec_in) * gain}


def _classes(params: dict[str, jax.Array], x: jax.Array) -> dict[str, jax.Array]:
    """Per-row class scores (FP32, labelled) and votes (INT64, no labels) of a batch."""
    scores = x * params["gain"]
    return {"scores": scores, "votes": (scores * 10).astype(jnp.int64)}


def _family_params(dtype: np.dtype) -> dict[str, np.ndarray]:
    cols = DTYPE_SHAPE[1]
    if dtype == np.bool_:
        return {"mask": np.array([True, False, True], dtype=bool)}
    if np.issubdtype(dtype, np.integer):
        scale = np.array([2, -3, 1], dtype=np.int64)
        shift = np.array([5, 7, -11], dtype=np.int64)
        if dtype == np.uint8:
            scale, shift = np.array([2, 3, 1]), np.array([5, 7, 11])
        if dtype == np.int64:
            shift = np.array([5_000_000_000, -7, 2**40 + 3], dtype=np.int64)
        return {"scale": scale.astype(dtype), "shift": shift.astype(dtype)}
    return {
        "scale": np.linspace(0.5, 1.5, cols).astype(dtype),
        "shift": np.array([0.25, -1.0, 3.0]).astype(dtype),
    }


def suite_models() -> list[SuiteModel]:
    """Every model the suite exports, in a fixed order."""
    models = []
    for suffix, dtype in DTYPE_FAMILY:
        models.append(
            SuiteModel(
                name=f"cf_{suffix}",
                fn=_logic if dtype == np.bool_ else _affine,
                params=_family_params(dtype),
                inputs={"data_in": jax.ShapeDtypeStruct(DTYPE_SHAPE, dtype)},
            )
        )
    models.append(
        SuiteModel(
            name="cf_multi",
            fn=_multi,
            params={"gain": np.array([1.0, -2.0, 0.5], dtype=np.float32)},
            inputs={
                "alpha": jax.ShapeDtypeStruct((2, 3), np.float32),
                "beta": jax.ShapeDtypeStruct((3,), np.int32),
            },
            output_names=["total", "positives", "greater"],
        )
    )
    models.append(
        SuiteModel(
            name="cf_big",
            fn=_big,
            params={"two": np.float32(2.0), "one": np.float32(1.0)},
            inputs={"big_in": jax.ShapeDtypeStruct((BIG_ELEMENTS,), np.float32)},
            goldens=1,
        )
    )
    models.append(
        SuiteModel(
            name="cf_check",
            fn=_checked,
            params={"gain": np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)},
            inputs={
                "index": jax.ShapeDtypeStruct((1,), np.int32),
                "row": jax.ShapeDtypeStruct((4,), np.float32),
            },
            checks=("user",),
            goldens=0,  # the suite's own cases cover passing and tripping inputs
        )
    )
    models.append(
        SuiteModel(
            name="cf_shapes",
            fn=_shapes,
            params={"two": np.float32(2.0)},
            inputs={"vec_in": jax.ShapeDtypeStruct((4,), np.float32),
                    "gain": jax.ShapeDtypeStruct((), np.float32)},
        )
    )
    models.append(
        SuiteModel(
            name="cf_batched",
            fn=_affine,
            params=_family_params(np.dtype("float32")),
            inputs={"data_in": jax.ShapeDtypeStruct((1, DTYPE_SHAPE[1]), np.float32)},
            batch_sizes=BATCH_SIZES,
            goldens=1,
        )
    )
    models.append(
        SuiteModel(
            name="cf_classes",
            fn=_classes,
            params={"gain": np.array([1.0, 2.0, 0.5, 1.0, 3.0], dtype=np.float32)},
            inputs={"x": jax.ShapeDtypeStruct((1, len(CLASS_LABELS)), np.float32)},
            batch_sizes=BATCH_SIZES,
            labels={"scores": CLASS_LABELS},
            goldens=1,
            x64=True,
        )
    )
    return models


def export_model(model: SuiteModel, out_dir: Path) -> None:
    """Export one suite model to `out_dir` (a version directory) with every option it needs:
    the one export call for suite models (`run.py`, the peers' repositories)."""
    from jaxport.exporter.api import export

    with tempfile.TemporaryDirectory(prefix="jaxport-labels-") as tmp:
        labels = {}
        for output, lines in model.labels.items():
            labels[output] = Path(tmp) / f"{output}.txt"
            labels[output].write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
        with jax.enable_x64(True) if model.x64 else contextlib.nullcontext():
            export(model.fn, model.params, model.inputs, out_dir,
                   output_names=model.output_names or None, goldens=model.goldens, quiet=True,
                   checks=list(model.checks) or None, batch_sizes=model.batch_sizes or None,
                   labels=labels or None)


def check_message(model: SuiteModel, *inputs: np.ndarray) -> str | None:
    """What `err.get()` says in-process for these inputs (None when no check fires)."""
    errors = checkify.user_checks
    with jax.enable_x64(True):
        err, _ = jax.jit(checkify.checkify(model.fn, errors=errors))(model.params, *inputs)
        return err.get()


def by_name(name: str) -> SuiteModel:
    """The suite model called `name`."""
    for m in suite_models():
        if m.name == name:
            return m
    raise KeyError(name)


def run_in_process(model: SuiteModel, *inputs: np.ndarray) -> list[np.ndarray]:
    """The model's outputs computed by JAX itself (x64 on, as the exporter does for 64-bit)."""
    with jax.enable_x64(True):
        if model.checks:
            _, out = jax.jit(checkify.checkify(model.fn, errors=checkify.user_checks))(
                model.params, *inputs
            )
        else:
            out = jax.jit(model.fn)(model.params, *inputs)
        return [np.asarray(leaf) for leaf in jax.tree.leaves(out)]


def output_names(model: SuiteModel) -> list[str]:
    """Output names in result order (dict keys sort, as jax flattens them)."""
    if model.output_names:
        return list(model.output_names)
    fn = model.fn
    if model.checks:
        def fn(*args: Any) -> Any:
            return checkify.checkify(model.fn, errors=checkify.user_checks)(*args)[1]
    with jax.enable_x64(True):
        shapes = jax.eval_shape(fn, model.params, *model.inputs.values())
    paths = jax.tree_util.tree_flatten_with_path(shapes)[0]
    return [str(p[-1].key) for p, _ in paths]
