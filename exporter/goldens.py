"""Golden cases: seeded sample inputs, and the outputs JAX itself computes for them.

The goldens are computed by the jitted function (not the exported program) with the params on
the device once for every case (`params_on_device`); `jaxport.artifact.goldens` writes them.
Check outputs and the caller's own cases for a checked program are added by
`jaxport.exporter.check_search.write_check_goldens`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jaxport.artifact import goldens as goldens_io
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter.errors import ExportError
from jaxport.exporter.program import Lowered
from jaxport.exporter.symbolic import Plan
from jaxport.protocol import dtypes

__all__ = [
    "check_padding",
    "params_on_device",
    "sample_inputs",
    "write_given_goldens",
    "write_goldens",
    "write_gradient_golden",
    "write_sized_goldens",
]


def sample_inputs(
    specs: Mapping[str, tuple[tuple[int, ...], np.dtype]], seed: int,
    masks: Collection[str] = (),
) -> dict[str, np.ndarray]:
    """Deterministic sample inputs: normal floats, integers in [0, 10), random booleans.

    Integers stay small and non-negative so that inputs used as indices or token ids are
    valid for any reasonable table. An integer padding mask (`masks`, `--pad T=mask`) gets 0
    or 1, the values a Hugging Face attention mask takes.
    """
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, (shape, dtype) in specs.items():
        row = dtypes.by_numpy(dtype)
        kind = np.dtype(row.numpy).kind
        if row.numpy_name == "bool":
            value = rng.random(shape) < 0.5
        elif kind in "iu":
            value = rng.integers(0, 2 if name in masks else 10, size=shape)
        else:
            value = rng.standard_normal(shape)
        out[name] = np.asarray(value).astype(row.numpy)
    return out


def params_on_device(params: Any) -> Any:
    """The params as device arrays, for computing goldens: each leaf transferred at most once.

    jax would otherwise copy every numpy leaf to the device on EVERY call of the jitted function
    (a full extra copy of the parameters per golden case). `jax.Array` leaves are used as they
    are; numpy leaves are put on the device once, zero-copy where the CPU client allows it
    (64-byte aligned buffers) and copied otherwise. Leaves spread over several devices are all
    moved to the default device, so one jitted call can take them.
    """
    leaves, treedef = jax.tree.flatten(params)
    devices = {d for leaf in leaves if isinstance(leaf, jax.Array) for d in leaf.devices()}
    if len(devices) > 1:
        target = jax.devices()[0]
        leaves = [jax.device_put(leaf, target) for leaf in leaves]
    else:
        target = next(iter(devices), None)
        leaves = [leaf if isinstance(leaf, jax.Array) else
                  jax.device_put(leaf, target, may_alias=True) for leaf in leaves]
    return jax.tree.unflatten(treedef, leaves)



def write_goldens(
    root: Path,
    manifest: manifest_pb2.Manifest,
    lowered: Lowered,
    params: Any,
    count: int,
    seed: int,
) -> None:
    """Write `count` cases for one program and add them to `manifest.goldens`.

    Case i has `sample_inputs(seed + i)` and the outputs the jitted function gives for them;
    it is named `case<i>`, or `b<N>_case<i>` for batch size N (and marked for that program).
    """
    add = _case_writer(root, manifest, lowered, params)
    specs = {k: (tuple(v.shape), np.dtype(v.dtype)) for k, v in lowered.inputs.items()}
    masks = {p.mask_input for p in manifest.padding}
    for i in range(count):
        add(f"{lowered.golden_prefix}case{i}", sample_inputs(specs, seed + i, masks))


def write_sized_goldens(root: Path, manifest: manifest_pb2.Manifest, lowered: Lowered,
                        params: Any, plan: Plan, seed: int) -> None:
    """The polymorphic program's cases (`Plan.golden_sizes`): every dimension at its smallest
    size (`dims_min`), then each dimension at a middle and at its largest size, the others at
    their smallest (`dims_T_mid`, `dims_T_max`); each computed by the jitted function at that
    concrete shape (a function that specialises on a shape shows up as a mismatch) and
    recorded with its sizes (`GoldenCase.dims`)."""
    add = _case_writer(root, manifest, lowered, params)
    for i, (label, sizes) in enumerate(plan.golden_sizes()):
        specs = {n: (plan.concrete_shape(n, sizes), dt) for n, (_, dt) in plan.shapes.items()}
        add(f"dims_{label}", sample_inputs(specs, seed + i, plan.padding.values()), sizes)


def check_padding(fn_name: str, lowered: Lowered, params: Any, plan: Plan,
                  manifest: manifest_pb2.Manifest, seed: int) -> None:
    """Prove each `--pad DIM=MASK` declaration on a sample: the function's outputs at a middle
    size equal (verify's per-dtype tolerance) its outputs on the same inputs padded along DIM
    (zeros, the mask False there), outputs with a DIM axis sliced back. ExportError otherwise:
    a consumer padding requests would silently answer differently."""
    from jaxport.exporter import verify  # the one comparison rule

    jitted = jax.jit(lowered.export_fn.fn)
    names = lowered.export_fn.output_names
    out_dims = {o.name: list(o.dim_names) for o in manifest.outputs}
    for dim, mask in plan.padding.items():
        d = plan.dims[dim]
        sizes = dict(plan.golden_sizes()[0][1])  # every dimension at its minimum
        padded_sizes = {**sizes, dim: min(d.max, sizes[dim] + 2 * d.multiple_of)}
        if padded_sizes[dim] == sizes[dim]:
            continue  # a dimension with one size cannot be padded
        specs = {n: (plan.concrete_shape(n, sizes), dt) for n, (_, dt) in plan.shapes.items()}
        inputs = sample_inputs(specs, seed, plan.padding.values())
        inputs[mask] = np.ones_like(inputs[mask])  # every real position valid
        padded = {}
        for n, value in inputs.items():
            axes = [(0, padded_sizes[a] - sizes[a]) if a == dim else (0, 0)
                    for a in plan.shapes[n][0]]
            padded[n] = np.pad(value, axes)  # zeros; False (or 0) for the mask
        plain = jitted(params, *inputs.values())
        wide = jitted(params, *padded.values())
        comps: dict[str, verify.Comparison] = {}
        for name, a, b in zip(names, plain, wide, strict=False):
            cut = tuple(slice(0, sizes[dim]) if n == dim else slice(None)
                        for n in out_dims.get(name) or [""] * np.ndim(b))
            verify.compare(name, np.asarray(b)[cut], np.asarray(a), comps)
        bad = next((c for c in comps.values() if not c.passed), None)
        if bad is not None:
            raise ExportError(
                f"--pad {dim}={mask}: padding {dim} from {sizes[dim]} to {padded_sizes[dim]} "
                f"with {mask} False there changes {fn_name}'s output {bad.output!r} (max "
                f"difference {bad.max_abs:.3g}): the function does not ignore masked "
                f"positions, so requests cannot be padded along {dim}; drop --pad")


def write_gradient_golden(root: Path, manifest: manifest_pb2.Manifest, lowered: Lowered,
                          program: manifest_pb2.Program, params: Any, seed: int) -> None:
    """For a differentiable artifact (vjp_order >= 1): give the program's first golden case
    seeded output cotangents and the VJP the original (jitted) function gives for them.

    Cotangents are N(0, 1) for floating-point results and zero (float0) for the others (check
    outputs, integers); gradients are stored for the floating-point `@main` arguments, by
    argument name. Consumers compare `jax.vjp` of the loaded program against them.
    """
    case = next((g for g in manifest.goldens
                 if g.batch_size == lowered.batch_size and g.outputs), None)
    if case is None:
        return
    specs = {k: np.dtype(v.dtype) for k, v in lowered.inputs.items()}
    inputs = [goldens_io.load_npy(root / case.inputs[k], dt) for k, dt in specs.items()]
    results, vjp_fn = jax.vjp(lowered.export_fn.fn, params, *inputs)
    rng = np.random.default_rng(seed)
    cotangents, stored = [], {}
    for name, value in zip(lowered.export_fn.result_names, results, strict=True):
        if np.issubdtype(value.dtype, np.inexact):
            ct = rng.standard_normal(value.shape).astype(value.dtype)
            if name in lowered.export_fn.output_names:
                stored[name] = ct
        else:
            ct = np.zeros(value.shape, jax.dtypes.float0)
        cotangents.append(ct)
    leaves = jax.tree.leaves(vjp_fn(type(results)(cotangents)))
    grads = {}
    for arg in program.arguments:
        if arg.leaf_index >= 0 and np.issubdtype(np.dtype(leaves[arg.leaf_index].dtype),
                                                 np.inexact):
            grads[arg.name] = np.asarray(leaves[arg.leaf_index])
    case.output_cotangents.update(goldens_io.write_arrays(root, case.name, "cotangents", stored))
    case.gradients.update(goldens_io.write_arrays(root, case.name, "gradients", grads))


def _case_writer(root: Path, manifest: manifest_pb2.Manifest, lowered: Lowered, params: Any
                 ) -> Callable[..., None]:
    """`add(name, inputs, dims=None)`: compute the outputs with the jitted function (compiled
    once for every case, or per shape), write both, and add the case to `manifest.goldens` for
    this program (`dims`: its symbolic dimensions' sizes; a bucket program's by default)."""
    export_fn = lowered.export_fn
    jitted = jax.jit(export_fn.fn)
    n_out = len(export_fn.output_names)

    def add(name: str, inputs: dict[str, np.ndarray],
            dims: Mapping[str, int] | None = None) -> None:
        results = jitted(params, *inputs.values())
        outputs = {k: np.asarray(r)
                   for k, r in zip(export_fn.output_names, results[:n_out], strict=True)}
        manifest.goldens.add(
            name=name, batch_size=lowered.batch_size,
            inputs=goldens_io.write_arrays(root, name, "inputs", inputs),
            outputs=goldens_io.write_arrays(root, name, "outputs", outputs),
            dims=dims if dims is not None else lowered.dims,
        )

    return add


_CASE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}")


def _case_arrays(case: str, value: Any, names: list[str]) -> dict[str, np.ndarray]:
    if isinstance(value, Mapping):
        if sorted(value) != sorted(names):
            raise ExportError(f"golden input case {case!r} has inputs {sorted(value)}; the "
                              f"model takes {names}")
        return {n: np.asarray(value[n]) for n in names}
    if isinstance(value, (list, tuple)) and len(value) == len(names):
        return {n: np.asarray(v) for n, v in zip(names, value, strict=True)}
    raise ExportError(f"golden input case {case!r}: expected a dict of input name -> array or "
                      f"a sequence of {len(names)} arrays in input order ({', '.join(names)})")


def write_given_goldens(
    root: Path,
    manifest: manifest_pb2.Manifest,
    lowered: Lowered,
    params: Any,
    cases: Mapping[str, Any],
) -> set[str]:
    """Add the caller's golden inputs (`golden_inputs` / `--golden-inputs`) whose shapes fit
    this program, with the outputs the jitted function gives; returns the cases used.

    Each value is cast to the input's dtype only when that keeps it (same kind of number);
    a case fits a program when every input has that program's shape.
    """
    add = _case_writer(root, manifest, lowered, params)
    names = list(lowered.inputs)
    used: set[str] = set()
    for case, value in cases.items():
        if not isinstance(case, str) or not _CASE_NAME.fullmatch(case):
            raise ExportError(f"golden input case name {case!r}: use letters, digits, _ . - "
                              "(it names a directory under goldens/)")
        arrays = _case_arrays(case, value, names)
        if any(arrays[n].shape != tuple(lowered.inputs[n].shape) for n in names):
            continue
        inputs = {}
        for n in names:
            want = np.dtype(lowered.inputs[n].dtype)
            got = arrays[n]
            if got.dtype != want and not (got.dtype.kind == want.kind or (
                    got.dtype.kind in "iu" and want.kind in "iuf")):
                raise ExportError(f"golden input case {case!r}: input {n!r} is {got.dtype}, "
                                  f"the model takes {want}")
            inputs[n] = got.astype(want)
        name = f"{lowered.golden_prefix}{case}"
        if any(g.name == name for g in manifest.goldens):
            raise ExportError(f"golden input case {case!r}: a golden case {name!r} exists "
                              "already (sampled cases are case0, case1, ...); rename it")
        add(name, inputs)
        used.add(case)
    return used
