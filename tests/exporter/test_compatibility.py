"""The compatibility window: the manifest records when the artifact was exported and its calling
convention; `jaxport.artifact.open` and `jaxport verify` warn (one line) when an artifact is
older than jax's 6-month backward-compatibility window or newer than the reading jax;
`--calling-convention N` exports for an older consumer within jax's supported range."""

from __future__ import annotations

import datetime
import json
import shutil
import warnings
from pathlib import Path

import jax
import pytest
from exporter_helpers import export_model, model_cli_args, run_cli
from jax import export as jax_export
from jaxport import artifact
from jaxport.artifact import manifest
from jaxport.exporter import verify

_OLD = "2025-12-01T00:00:00Z"  # SOURCE_DATE_EPOCH 1764547200: a year before these tests


def _open_warnings(art: Path) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        artifact.open(art)
    return [str(w.message) for w in caught if w.category is manifest.CompatibilityWarning]


def test_fresh_artifact_records_its_export_time_and_is_not_warned_about(artifacts) -> None:
    art = artifacts("mlp")
    m = manifest.load(art)
    when = manifest.exported_at(m)
    assert when is not None and when <= datetime.datetime.now(datetime.UTC)
    assert json.loads((art / "manifest.json").read_text())["exportedAt"] == m.exported_at
    assert m.versions.calling_convention == jax.config.jax_export_calling_convention_version
    assert _open_warnings(art) == []


def test_old_artifact_warns_on_open_and_in_verify(tmp_path: Path, monkeypatch) -> None:
    """Exported with SOURCE_DATE_EPOCH a year back: one warning line, naming the date, the
    window, its source and what to do; verify prints it and still passes."""
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764547200")
    art = tmp_path / "old" / "1"
    m = export_model("mlp", art, goldens=1)
    assert m.exported_at == _OLD
    (line,) = _open_warnings(art)
    days = (datetime.datetime.now(datetime.UTC)
            - datetime.datetime(2025, 12, 1, tzinfo=datetime.UTC)).days
    assert line == (
        f"{art}: exported 2025-12-01 with jax {jax.__version__}, {days} days ago: older than "
        "jax's 6-month backward-compatibility window for serialized exports (jax docs, "
        "jax.export 'Compatibility guarantees'); a jax released since may refuse it (override "
        "at your own risk: jax_export_deserialize_expired_versions), so re-export it with the "
        "current jax")
    assert "\n" not in line
    proc = run_cli(["verify", str(art), "--checks", "checksums,jaxexport"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stderr.strip() == "jaxport verify: warning: " + line.split(": ", 1)[1]


def test_window_edges_and_a_newer_exporting_jax(artifacts) -> None:
    """Warned from day 184 (183 days = 6 months is still inside); and when the artifact's jax
    is newer than the reading one (jax promises 3 weeks of forward compatibility)."""
    m = manifest.load(artifacts("mlp"))
    when = manifest.exported_at(m)
    here = jax.__version__
    inside = manifest.compatibility_warnings(m, now=when + datetime.timedelta(days=183),
                                             jax_version=here)
    assert inside == []
    (late,) = manifest.compatibility_warnings(m, now=when + datetime.timedelta(days=184),
                                              jax_version=here)
    assert late.startswith(f"exported {when:%Y-%m-%d} with jax {here}, 184 days ago: older ")
    (newer,) = manifest.compatibility_warnings(m, now=when, jax_version="0.11.0")
    assert newer == (
        f"exported with jax {m.versions.jax}, newer than this jax 0.11.0: jax promises only "
        "3 weeks of forward compatibility (jax docs, jax.export 'Compatibility guarantees'); "
        "upgrade jax here or re-export with this one")


def test_unknown_age_and_malformed_date(artifacts, tmp_path: Path) -> None:
    """No exportedAt (artifacts written before the field): unknown age, no warning. A value
    that is not a UTC timestamp is refused naming the field."""
    copy = tmp_path / "nodate" / "1"
    shutil.copytree(artifacts("mlp"), copy)
    raw = json.loads((copy / "manifest.json").read_text())
    raw["exportedAt"] = ""
    (copy / "manifest.json").write_text(json.dumps(raw))
    assert manifest.exported_at(manifest.load(copy)) is None
    assert _open_warnings(copy) == []
    raw["exportedAt"] = "yesterday"
    (copy / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(artifact.ArtifactError,
                       match=r"manifest.json: exportedAt 'yesterday' is not a UTC timestamp "
                             r"like 2026-12-01T00:41:07Z"):
        artifact.open(copy)


def test_calling_convention_for_an_older_consumer(tmp_path: Path) -> None:
    low = jax_export.minimum_supported_calling_convention_version
    assert low < jax.config.jax_export_calling_convention_version  # an older one exists
    art = tmp_path / "cc" / "1"
    proc = run_cli(model_cli_args("mlp", art, "--goldens", "1", "--calling-convention",
                                  str(low)), tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert manifest.load(art).versions.calling_convention == low
    assert artifact.open(art).exported().calling_convention_version == low
    results = verify.run_checks(art, checks=("jaxexport", "pjrt"))
    assert [r.status for r in results] == ["pass", "pass"], [r.detail for r in results]


@pytest.mark.parametrize("bad", ["low", "high"])
def test_calling_convention_outside_the_range_is_refused_naming_it(bad: str,
                                                                  tmp_path: Path) -> None:
    low = jax_export.minimum_supported_calling_convention_version
    high = jax_export.maximum_supported_calling_convention_version
    version = low - 1 if bad == "low" else high + 1
    out = tmp_path / "cc" / "1"
    proc = run_cli(model_cli_args("mlp", out, "--calling-convention", str(version)), tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"jaxport export: error: calling convention {version} (--calling-convention) is "
        f"outside the range jax {jax.__version__} can export: {low}..{high}; an older consumer "
        "needs an older jax to export for it")
    assert not out.exists()
