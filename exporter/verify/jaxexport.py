"""The `jaxexport` check: `jax.export.deserialize(model.jaxexport)` agrees with the manifest
(argument order, kept leaves, shapes, dtypes, a sharded program's layouts) and
`.call(params, *golden inputs)` equals the goldens (and its VJP the gradient goldens)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jaxport.artifact
import numpy as np
from jaxport.artifact import manifest as manifest_mod
from jaxport.artifact import sharding as sharding_io
from jaxport.artifact.errors import ArtifactError
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter import module as module_mod
from jaxport.exporter.verify import cases
from jaxport.exporter.verify.reference import f32_reference
from jaxport.exporter.verify.results import CheckResult, result
from jaxport.exporter.verify.tolerances import Comparison, compare

_ARG = manifest_pb2.ArgumentRole
_RES = manifest_pb2.ResultRole


def _check_manifest_matches(exp: Any, m: manifest_pb2.Manifest,
                            program: manifest_pb2.Program, mesh: Any = None) -> None:
    """The manifest's argument list (and a sharded program's layouts) is exactly what jax
    recorded for the program."""
    import jax

    if tuple(exp.platforms) != tuple(m.platforms):
        raise ArtifactError(f"manifest platforms {list(m.platforms)} != program {exp.platforms}")
    if exp.nr_devices != max(1, m.nr_devices):
        raise ArtifactError(f"manifest nr_devices {m.nr_devices} != the program's "
                            f"{exp.nr_devices}")
    if mesh is not None:
        recorded = exp.in_shardings_jax(mesh)
        laid_out = [(f"argument {a.index}", a, recorded[a.leaf_index])
                    for a in program.arguments if a.leaf_index >= 0]
        results = [r for r in program.results if r.role != _RES.RESULT_ROLE_TOKEN]
        laid_out += [(f"result {r.index}", r, s)
                     for r, s in zip(results, exp.out_shardings_jax(mesh), strict=True)]
        for what, entry, sharding in laid_out:
            want = sharding_io.spec_strings(sharding.spec, len(entry.shape))
            if list(entry.sharding.spec) != want:
                raise ArtifactError(
                    f"manifest {what} ({entry.name}) sharding {list(entry.sharding.spec)} != "
                    f"the program's {want}: the manifest was edited or is stale")
    n = exp.in_tree.num_leaves
    paths = [jax.tree_util.keystr(p) for p, _ in
             jax.tree_util.tree_flatten_with_path(exp.in_tree.unflatten(list(range(n))))[0]]
    leaf_args = [a for a in program.arguments
                 if a.role in (_ARG.ARGUMENT_ROLE_PARAMETER, _ARG.ARGUMENT_ROLE_INPUT)]
    kept = [a.leaf_index for a in leaf_args]
    if kept != list(exp.module_kept_var_idx):
        raise ArtifactError(
            f"manifest argument order (leaves {kept}) does not match the program's "
            f"(leaves {list(exp.module_kept_var_idx)}): the manifest was edited or is stale"
        )
    declared = module_mod.main_signature(exp.mlir_module())
    described = ["!stablehlo.token" if a.role == _ARG.ARGUMENT_ROLE_TOKEN else
                 "tensor<" + "".join("?x" if d < 0 else f"{d}x" for d in a.shape)
                 + a.dtype.mlir + ">"
                 for a in program.arguments]
    if declared != described:
        raise ArtifactError(
            f"{program.mlirbc_file}: @main takes {declared}, the manifest describes "
            f"{described}: the manifest was edited or is stale"
        )
    inputs = [i.name for i in m.inputs]
    expressions = {d.name: d.expression for d in m.dimensions}
    for arg in leaf_args:
        aval = exp.in_avals[arg.leaf_index]
        if arg.role == _ARG.ARGUMENT_ROLE_PARAMETER:
            want_path = "[0][0]" + arg.key_path
        else:
            want_path = f"[0][{inputs.index(arg.name) + 1}]"
        # A symbolic axis (-1, named) is the dimension's expression in jax's aval (`8*T_8`).
        want_shape = [expressions.get(n, "?") if n else str(d)
                      for d, n in zip(arg.shape, list(arg.dim_names) or [""] * len(arg.shape),
                                      strict=True)]
        if paths[arg.leaf_index] != want_path or [str(d) for d in aval.shape] != want_shape or \
                np.dtype(aval.dtype) != manifest_mod.numpy_dtype(arg.dtype):
            raise ArtifactError(
                f"manifest argument {arg.index} ({arg.name}) says {arg.dtype.numpy}"
                f"{list(arg.shape)} at {want_path}, the program has {aval.dtype}"
                f"{list(aval.shape)} at {paths[arg.leaf_index]}"
            )


def check(art: jaxport.artifact.Artifact, platform: str) -> CheckResult:
    """Deserialize every program, match it against the manifest, call it on its cases."""
    import jax

    m = art.manifest
    goldens = art.goldens()
    comps: dict[str, Comparison] = {}
    device = jax.devices(platform)[0]
    mesh = art.mesh()  # a sharded program runs on its nr_devices devices
    for program in m.programs:  # every batch size's program (one when unbatched)
        exp = art.exported(program.batch_size, dims=dict(program.dims) or None)
        _check_manifest_matches(exp, m, program, mesh)
        refs = f32_reference(art, program, cases.program_cases(goldens, program))
        # A sharded program: each leaf laid out as its manifest sharding says (once per program).
        shardings = None if mesh is None else art.leaf_shardings(mesh, program.batch_size)
        for case in cases.program_cases(goldens, program):
            # Stored parameters and the case's inputs in the exported pytree; zeros for
            # leaves jax dropped (any value of the right type).
            args, kwargs = art.call_arguments(case.inputs, program.batch_size,
                                              dims=dict(program.dims) or None)
            if shardings is None:
                args, kwargs = jax.device_put((args, kwargs), device)
            else:
                leaves, tree = jax.tree.flatten((args, kwargs))
                args, kwargs = jax.tree.unflatten(tree, jax.device_put(leaves, shardings))
            results = jax.tree.leaves(exp.call(*args, **kwargs))
            cases.compare_case(program, results, cases.expected(case), comps, refs.get(case.name))
            if case.gradients:
                _compare_gradients(exp, program, case, args, comps)
    return result("jaxexport", comps, cases.detail(goldens, m) + cases.where(m, platform))


def _compare_gradients(exp: Any, program: manifest_pb2.Program,
                       case: jaxport.artifact.Golden, args: Sequence[Any],
                       comps: dict[str, Comparison]) -> None:
    """`jax.vjp` of the loaded program (its serialized VJP, vjp_order >= 1) with the case's
    output cotangents equals the gradients `jax.vjp` of the original gave: one row per
    argument, `grad <name>`."""
    import jax

    results, vjp_fn = jax.vjp(exp.call, *args)
    leaves, tree = jax.tree.flatten(results)
    names = [r.name for r in program.results if r.role != _RES.RESULT_ROLE_TOKEN]
    cts = [case.output_cotangents[n] if n in case.output_cotangents else
           np.zeros(v.shape, jax.dtypes.float0 if not np.issubdtype(v.dtype, np.inexact)
                    else v.dtype)
           for n, v in zip(names, leaves, strict=True)]
    grads = jax.tree.leaves(vjp_fn(jax.tree.unflatten(tree, cts)))
    by_name = {a.name: a.leaf_index for a in program.arguments}
    for name, want in case.gradients.items():
        compare(f"grad {name}", np.asarray(grads[by_name[name]]), want, comps)
