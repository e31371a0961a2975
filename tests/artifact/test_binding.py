"""`jaxport.artifact.binding`, the one manifest argument binder (reader, the bridge's loading and
verify use it), on real manifests: the committed back-compat artifact and a two-platform export
of tests/models/unused.py (a platform index, a dropped parameter and a dropped input). Bound
arguments must run the real programs to their goldens: `@main` through PJRT, the pytree leaves
through `Exported.call`."""

from __future__ import annotations

import sys
from pathlib import Path

import jax
import jaxport.artifact
import numpy as np
import pytest
from jax.extend import backend as jex_backend
from jaxport.artifact import binding
from jaxport.artifact.errors import ArtifactError
from jaxport.artifact.gen import manifest_pb2

TESTS = Path(__file__).resolve().parents[1]
BACKCOMPAT = sorted(p for p in (TESTS / "backcompat").iterdir() if (p / "manifest.json").is_file())
_ARG = manifest_pb2.ArgumentRole


@pytest.fixture(scope="module")
def unused(tmp_path_factory: pytest.TempPathFactory) -> jaxport.artifact.Artifact:
    """unused.py exported for cpu and cuda: argument 0 is the platform index."""
    sys.path.insert(0, str(TESTS / "models"))
    try:
        import unused as mod
    finally:
        sys.path.remove(str(TESTS / "models"))
    from jaxport.exporter import export

    out = tmp_path_factory.mktemp("binding") / "unused" / "1"
    inputs = {k: jax.ShapeDtypeStruct(s, d) for k, (d, s) in mod.INPUTS.items()}
    export(mod.predict, mod.init(jax.random.key(0)), inputs, out, quiet=True, goldens=2,
           platforms=("cpu", "cuda"))
    return jaxport.artifact.open(out)


@pytest.fixture(scope="module", params=BACKCOMPAT, ids=lambda p: p.name)
def backcompat(request: pytest.FixtureRequest) -> jaxport.artifact.Artifact:
    return jaxport.artifact.open(request.param)


def _run_main(art: jaxport.artifact.Artifact, values: list) -> list[np.ndarray]:
    """The raw `model.mlirbc` compiled by PJRT on cpu, called with `values` in @main order."""
    program = art.manifest.programs[0]
    client = jex_backend.get_backend("cpu")
    device = client.local_devices()[0]
    executable = client.compile_and_load(
        art.read_file(program.mlirbc_file), [device],
        jex_backend.get_compile_options(num_replicas=1, num_partitions=1))
    out = executable.execute_sharded([jax.device_put(np.asarray(v), device) for v in values])
    return [np.asarray(o[0]) for o in out.disassemble_into_single_device_arrays()]


def _assert_outputs(art: jaxport.artifact.Artifact, results: list, case) -> None:
    names = [r.name for r in art.manifest.programs[0].results]
    assert set(case.outputs) <= set(names)
    for name, got in zip(names, results, strict=True):
        np.testing.assert_allclose(np.asarray(got), case.outputs[name], rtol=1e-5, atol=1e-6)


def test_main_arguments_run_the_backcompat_program(backcompat) -> None:
    m, program = backcompat.manifest, backcompat.manifest.programs[0]
    params = backcompat.parameters()
    for case in backcompat.goldens():
        values = binding.main_arguments(m, program, params, case.inputs, "cpu")
        assert len(values) == len(program.arguments)
        for arg, value in zip(program.arguments, values, strict=True):
            want = params[arg.name] if arg.role == _ARG.ARGUMENT_ROLE_PARAMETER \
                else case.inputs[arg.name]
            assert value is want, arg.name
        _assert_outputs(backcompat, _run_main(backcompat, values), case)


def test_input_slots_and_unfilled_inputs(backcompat) -> None:
    m, program = backcompat.manifest, backcompat.manifest.programs[0]
    values = binding.main_arguments(m, program, backcompat.parameters(), None, "cpu")
    slots = binding.input_slots(m, program)
    assert [i for i, v in enumerate(values) if v is None] == [s for s, _ in slots]
    assert [program.arguments[s].name for s, _ in slots] == \
        [m.inputs[p].name for _, p in slots]
    assert sorted(p for _, p in slots) == list(range(len(m.inputs)))
    assert [a.name for a in binding.parameter_arguments(program)] == \
        list(backcompat.parameters())


def test_platform_index_is_the_platforms_position(unused) -> None:
    m, program = unused.manifest, unused.manifest.programs[0]
    assert list(m.platforms) == ["cpu", "cuda"]
    assert program.arguments[0].role == _ARG.ARGUMENT_ROLE_PLATFORM_INDEX
    for position, platform in enumerate(m.platforms):
        value = binding.main_arguments(m, program, unused.parameters(), None, platform)[0]
        assert isinstance(value, np.ndarray) and value.shape == ()
        assert int(value) == position and value.dtype == np.dtype(program.arguments[0].dtype.numpy)
    case = unused.goldens()[0]
    values = binding.main_arguments(m, program, unused.parameters(), case.inputs, "cpu")
    _assert_outputs(unused, _run_main(unused, values), case)


def test_leaves_fill_what_jax_dropped(unused) -> None:
    m, program = unused.manifest, unused.manifest.programs[0]
    exp = unused.exported()
    dropped = {d.name: d.leaf_index for d in m.dropped_leaves}
    assert set(dropped) == {"params.a_unused", "ignored"}
    assert binding.input_leaves(m, program) == \
        [next(a.leaf_index for a in program.arguments if a.name == "x"), dropped["ignored"]]
    case = unused.goldens()[0]
    leaves = binding.leaves(m, program, exp.in_avals, unused.parameters(), case.inputs)
    assert len(leaves) == len(exp.in_avals)
    zeros = leaves[dropped["params.a_unused"]]
    assert zeros.shape == (5, 5) and not zeros.any()  # not stored: any value of its type
    assert leaves[dropped["ignored"]] is case.inputs["ignored"]
    assert all(leaf is None for i, leaf in enumerate(
        binding.leaves(m, program, exp.in_avals, unused.parameters(), None))
        if i in binding.input_leaves(m, program))
    args, kwargs = exp.in_tree.unflatten(leaves)
    _assert_outputs(unused, jax.tree.leaves(exp.call(*args, **kwargs)), case)


def _edited(art: jaxport.artifact.Artifact) -> manifest_pb2.Manifest:
    m = manifest_pb2.Manifest()
    m.CopyFrom(art.manifest)
    return m


def test_refusals_name_the_argument(backcompat) -> None:
    m = _edited(backcompat)
    program = m.programs[0]
    program.arguments.add(index=len(program.arguments), role=_ARG.ARGUMENT_ROLE_TOKEN,
                          name="token_0", leaf_index=-1)
    with pytest.raises(ArtifactError, match=r"argument \d+ \('token_0'\) has role "
                                            r"ARGUMENT_ROLE_TOKEN, which cannot be bound"):
        binding.main_arguments(m, program, backcompat.parameters(), None, "cpu")

    m = _edited(backcompat)
    del m.inputs[0]  # argument `x` is an input the manifest no longer declares
    with pytest.raises(ArtifactError, match=r"is input 'x', which Manifest.inputs does not"):
        binding.input_slots(m, m.programs[0])

    m = _edited(backcompat)
    m.inputs.add(name="ghost")
    with pytest.raises(ArtifactError, match="input 'ghost' is neither an argument nor dropped"):
        binding.input_leaves(m, m.programs[0])
