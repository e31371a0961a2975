"""docs/guide-flax.md, run as written: `# file:` blocks are written, other Python blocks run as
scripts, every `jaxport` line of the sh blocks runs, in order, in one empty directory."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from exporter_helpers import REPO, run_cli
from jaxport.artifact import manifest

GUIDE = REPO / "docs" / "guide-flax.md"
_BLOCK = re.compile(r"```(python|sh)\n(.*?)```", re.S)


def _blocks() -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in _BLOCK.finditer(GUIDE.read_text())]


def test_guide_has_every_section() -> None:
    text = GUIDE.read_text()
    for heading in ("## Linen", "## NNX", "### Eval mode", "### NNX state saved with Orbax",
                    "## TrainState checkpoints (Orbax)", "## Hugging Face Flax models"):
        assert heading in text


@pytest.mark.slow  # every snippet of the guide in fresh processes (~25 s): make test-all
def test_guide_snippets_run(tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(tmp_path), JAX_PLATFORMS="cpu")
    ran = 0
    for kind, code in _blocks():
        if kind == "python":
            first = code.splitlines()[0]
            if first.startswith("# file: "):
                (tmp_path / first.removeprefix("# file: ").strip()).write_text(code)
                continue
            proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, f"{code}\n{proc.stderr[-3000:]}"
            ran += 1
            continue
        for line in code.splitlines():
            if not line.startswith("jaxport "):
                continue
            proc = run_cli(shlex.split(line)[1:], tmp_path, pythonpath=(tmp_path,))
            assert proc.returncode == 0, f"{line}\n{proc.stdout}\n{proc.stderr}"
            ran += 1
    assert ran == 14  # 4 scripts, 10 jaxport commands
    # What the guide says about the artifacts holds.
    linen = manifest.load(tmp_path / "repo/linen/1")
    assert [o.name for o in linen.outputs] == ["logits", "probs"]
    nnx = manifest.load(tmp_path / "repo/nnx/1")
    names = [a.name for a in nnx.programs[0].arguments if a.role == 1]
    assert "params.hidden.kernel" in names and not any("rngs" in n for n in names)
    assert manifest.load(tmp_path / "repo/nnx_api/1").programs[0].arguments[0].name == \
        "params.head.bias"
    assert [o.name for o in manifest.load(tmp_path / "repo/bert/1").outputs] == ["pooled"]
    orbax_nnx = manifest.load(tmp_path / "repo/nnx_orbax/1")
    names = [a.name for a in orbax_nnx.programs[0].arguments if a.role == 1]
    assert "params.hidden.kernel.value" in names and not any("rngs" in n for n in names)
    assert len(manifest.load(tmp_path / "repo/trained/2").goldens) == 1
    trained = [a.name for a in manifest.load(tmp_path / "repo/trained/1").programs[0].arguments]
    assert {"params.params.bn.scale", "params.batch_stats.bn.mean"} <= set(trained)
    assert (tmp_path / "repo/llama/1/model.mlirbc").stat().st_size >= 65536
    text = GUIDE.read_text()

    # What the guide says the two mistakes print.
    proc = run_cli(["export", "bn_model:predict", "--params", "ckpts", "--params-path", "params",
                    "--input", "x:float32[4,8]", "--out", "repo/bad/1"], tmp_path,
                   pythonpath=(tmp_path,))
    assert proc.returncode == 1
    assert "which collection is missing" in text and "--params-path params,batch_stats" in text
    assert "no 'params' collection" in proc.stderr
    assert "--params-path params,batch_stats" in proc.stderr
    proc = run_cli(["export", "llama_model:predict", "--params", "llama_model:init", "--input",
                    "input_ids:int32[1,8]", "--out", "repo/bad/2"], tmp_path,
                   pythonpath=(tmp_path,))
    assert proc.returncode == 1
    error = proc.stderr.strip().splitlines()[-1]
    quoted = re.search(r"Without the flag: `(.*?)`\.", text, re.S).group(1)
    for part in " ".join(quoted.split()).split("..."):
        assert part.strip() in error, (part, error)
