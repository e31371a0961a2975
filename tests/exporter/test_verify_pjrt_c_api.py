"""`jaxport verify`'s `pjrt-c-api` check (exporter/verify/pjrt_c_api.py): the artifact's golden
cases run through the PJRT C API by `jaxport-native-goldens` (the front's native engine, no
Python on the execution path), compared with verify's own rule.

The program and the plugin are `make setup`'s, handed over by tests/tiers.py
(support.binaries); they run on the demo's artifact and on the same model with batch sizes 1
and 4. A tampered weight fails in one line naming the parameter; a wrong golden fails
on verify's rule naming the output; no program, no plugin and a model the engine does not run
are skips that say why and what to run.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import jaxport.artifact
import pytest
from exporter_helpers import REPO, export_model, run_cli
from jaxport.artifact import manifest as manifest_mod
from jaxport.exporter import verify
from jaxport.exporter.verify import cases, pjrt_c_api

if str(REPO / "tests") not in sys.path:
    sys.path.insert(0, str(REPO / "tests"))
from support import binaries
from support import pjrt_artifacts as shared

NAME = "pjrt-c-api"
BINARY = REPO / ".venv" / "bin" / pjrt_c_api.BINARY


@pytest.fixture(scope="module")
def native_goldens() -> Path:
    """The program and the plugin `make setup` built (handed over by tests/tiers.py)."""
    binaries.path("pjrt-plugin")
    program = binaries.path("native-goldens")
    assert program == BINARY, f"verify runs {BINARY}, the tiers handed over {program}"
    return program


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The demo's artifact and a batched one (batch sizes 1, 4), exported once."""
    return shared.export_demo_and_batched(tmp_path_factory.mktemp("pjrt-c-api"))


def _open(art: Path) -> jaxport.artifact.Artifact:
    return jaxport.artifact.open(art, verify_checksums=False)


def _one(art: Path) -> verify.CheckResult:
    [result] = verify.run_checks(art, checks=[NAME])
    assert result.check == NAME
    return result


@pytest.mark.parametrize("which", ["demo", "batched"])
def test_every_golden_passes_without_python(native_goldens: Path, artifacts: dict[str, Path],
                                            which: str, tmp_path: Path) -> None:
    art = artifacts[which]
    m = manifest_mod.load(art)
    proc = run_cli(["verify", str(art), "--checks", f"checksums,{NAME}"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith(NAME + " ")]
    assert {r[1] for r in rows} == {o.name for o in m.outputs}
    assert all(r[-1] == "PASS" for r in rows), proc.stdout
    n = len(m.goldens)
    over = "" if len(m.programs) == 1 else \
        f" over {len(m.programs)} programs (batch sizes " \
        f"{','.join(str(p.batch_size) for p in m.programs)})"
    assert f"{NAME}: pass: {n} golden case(s){over}, native engine (PJRT C API, no Python)" \
        in proc.stdout, proc.stdout
    # Every output was compared within verify's float32 rule. The error may be 0 or not: the
    # plugin's XLA and the exporter's may or may not round alike on this CPU (a result that
    # does not go through the program fails: test_wrong_golden_fails_on_verifys_rule).
    result = _one(art)
    assert result.status == "pass", result.detail
    assert {c.output for c in result.comparisons} == {o.name for o in m.outputs}
    assert all(c.max_abs <= 1e-5 for c in result.comparisons), result.comparisons


def test_tampered_weight_fails_naming_the_parameter(native_goldens: Path,
                                                   artifacts: dict[str, Path],
                                                   tmp_path: Path) -> None:
    art = shared.copy_artifact(artifacts["batched"], tmp_path)
    shared.flip_weight_bit(art)
    result = _one(art)
    assert result.status == "fail" and not result.comparisons
    assert "\n" not in result.detail
    # The engine reads the parameter chunk by chunk and names the chunk file that differs
    # from the sha256 the manifest lists for it.
    chunk = "weights/params.hidden.w/c/0/0"
    want = next(f.sha256 for f in manifest_mod.load(art).files if f.path == chunk)
    assert result.detail.startswith(f"{art}/{chunk}: sha256 mismatch: expected {want}, "
                                    "actual "), result.detail
    proc = run_cli(["verify", str(art), "--checks", NAME], tmp_path)
    assert proc.returncode == 1 and f"FAILED: {NAME}" in proc.stdout, proc.stdout + proc.stderr
    assert f"{NAME}: fail: {art}/{chunk}: sha256 mismatch" in proc.stdout


def test_wrong_golden_fails_on_verifys_rule(native_goldens: Path, artifacts: dict[str, Path],
                                           tmp_path: Path) -> None:
    """A golden that disagrees with the program (its checksum updated, so it is read): the
    output's row fails with the error verify measured."""
    art = shared.copy_artifact(artifacts["batched"], tmp_path)
    shared.change_golden(art, shared.BATCHED_GOLDEN, 0.01)
    result = _one(art)
    assert result.status == "fail"
    by_output = {c.output: c for c in result.comparisons}
    assert not by_output["probs"].passed and by_output["logits"].passed
    assert by_output["probs"].max_abs == pytest.approx(0.01, rel=1e-3)


def test_no_program_is_a_skip_naming_make_front(artifacts: dict[str, Path],
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cases, "find_tool", lambda name: None)
    result = pjrt_c_api.check(_open(artifacts["demo"]))
    assert result.status == "skip"
    assert result.detail == ("jaxport-native-goldens (the native engine's goldens program) is "
                             "not built: run `make front` (or `make setup`) in a jaxport checkout")


def test_no_plugin_is_a_skip_naming_make_pjrt_plugin(native_goldens: Path,
                                                    artifacts: dict[str, Path], tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The program away from the checkout (no build/pjrt under it, its parents or the working
    directory) finds no CPU plugin: exit 3, a skip that says `make pjrt-plugin`."""
    lone = tmp_path / "bin" / pjrt_c_api.BINARY
    lone.parent.mkdir()
    shutil.copy2(native_goldens, lone)
    monkeypatch.setattr(cases, "find_tool", lambda name: str(lone))
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("JAXPORT_PJRT_PLUGIN", raising=False)
    result = pjrt_c_api.check(_open(artifacts["demo"]))
    assert result.status == "skip", result.detail
    assert result.detail.startswith("no CPU PJRT plugin: build/pjrt/pjrt_c_api_cpu_plugin.so "
                                    "not found"), result.detail
    assert "run `make pjrt-plugin`" in result.detail
    # A plugin named by path that is not there: the same skip, still saying what to run.
    monkeypatch.setenv("JAXPORT_PJRT_PLUGIN", str(tmp_path / "missing.so"))
    result = pjrt_c_api.check(_open(artifacts["demo"]))
    assert result.status == "skip"
    assert result.detail == (f"PJRT plugin {tmp_path / 'missing.so'}: not a file (--pjrt-plugin "
                             "takes cpu, cuda or a path); `make pjrt-plugin` installs the "
                             "pinned CPU plugin"), result.detail


def test_model_the_engine_does_not_run_is_a_skip_with_its_reason(native_goldens: Path,
                                                                tmp_path: Path) -> None:
    """Lowered for cuda only: the CPU plugin's engine does not run it (jaxport serve serves it
    on the workers); the skip gives the engine's reason."""
    art = tmp_path / "cuda" / "1"
    export_model("mlp", art, platforms=("cuda",), goldens=1)
    result = _one(art)
    assert result.status == "skip"
    assert result.detail == ("the native engine does not run this model (jaxport serve serves "
                             "it on the Python workers): lowered for [cuda], the PJRT plugin "
                             "runs cpu")


def test_binary_is_found_next_to_the_interpreter(native_goldens: Path) -> None:
    """verify's worker runs this venv's python: the program `make setup` put beside it."""
    assert cases.find_tool(pjrt_c_api.BINARY) == str(native_goldens)
    assert os.access(native_goldens, os.X_OK)
