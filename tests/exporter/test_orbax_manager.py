"""`--params` takes a CheckpointManager root (latest step, or --step N), a step directory or
an item directory; errors list the steps and items found."""

from __future__ import annotations

from pathlib import Path

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from exporter_helpers import model_cli_args, model_module, run_cli
from jaxport.artifact import manifest, weights


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[int, dict]]:
    """A single-item manager (steps 1 and 5) and a composite one (items state, meta) at step 3."""
    root = tmp_path_factory.mktemp("orbax")
    base = model_module("mlp").init(jax.random.key(0))
    by_step = {s: jax.tree.map(lambda a, s=s: np.asarray(a) * s, base) for s in (1, 3, 5)}
    with ocp.CheckpointManager(root / "single") as mgr:
        for s in (1, 5):
            mgr.save(s, args=ocp.args.StandardSave(by_step[s]))
        mgr.wait_until_finished()
    with ocp.CheckpointManager(root / "multi", item_names=("state", "meta")) as mgr:
        mgr.save(3, args=ocp.args.Composite(
            state=ocp.args.StandardSave({"params": by_step[3], "step": np.int32(3)}),
            meta=ocp.args.StandardSave({"lr": np.float32(0.1)})))
        mgr.wait_until_finished()
    return root, by_step


def _export(tmp_path: Path, params: str, *extra: str):
    out = tmp_path / "out"
    args = model_cli_args("mlp", out, "--goldens", "0", *extra)
    args[args.index("mlp:init")] = params
    return run_cli(args, tmp_path), out


def _assert_weights(out: Path, expected: dict) -> None:
    """Weights are stored verbatim: exact equality with the checkpoint's arrays."""
    m = manifest.load(out)
    got = weights.read_parameters(out, m.programs[0])
    want = [np.asarray(a) for a in jax.tree.leaves(expected)]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize(("where", "extra", "step"), [
    ("single", (), 5),  # the root: latest step
    ("single", ("--step", "latest"), 5),
    ("single", ("--step", "1"), 1),
    ("single/1", (), 1),  # a step directory
    ("single/1/default", (), 1),  # an item directory
    ("multi", ("--params-path", "state.params"), 3),
    ("multi/3/state", ("--params-path", "params"), 3),
])
def test_manager_layouts(tmp_path: Path, checkpoints, where: str, extra: tuple, step: int) -> None:
    root, by_step = checkpoints
    proc, out = _export(tmp_path, str(root / where), *extra)
    assert proc.returncode == 0, proc.stderr
    _assert_weights(out, by_step[step])


@pytest.mark.parametrize(("where", "extra", "needles"), [
    ("single", ("--step", "7"), ["--step 7: no such step", "steps found: 1, 5"]),
    ("single", ("--step", "x"), ["--step 'x': expected a step number or latest"]),
    ("multi", (), ["several items (meta, state)", "--params-path meta"]),
    ("single/1/default", ("--step", "1"), ["one checkpoint item"]),
    ("multi", ("--params-path", "state.params,meta.lr"),
     ["several items (meta, state)", "every path of a comma-separated list in the same item"]),
    ("single", ("--params-path", "w1,w1"), ["'w1,w1': the paths of a list must end in distinct "
                                            "names", "'w1' is there twice"]),
    ("", (), ["not an Orbax checkpoint", "directories found: multi, single"]),
])
def test_manager_errors_list_what_is_there(tmp_path: Path, checkpoints, where: str,
                                           extra: tuple, needles: list[str]) -> None:
    root, _ = checkpoints
    proc, out = _export(tmp_path, str(root / where) if where else str(root), *extra)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    assert not out.exists()
