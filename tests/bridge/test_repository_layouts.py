"""Where a repository is and how it is laid out, through a real `jaxport serve`: a
repository by URL behind a real loopback HTTP server (read-only, tests/artifact/
loopback_http.py, listed by its `index.json`), a single-model root (KServe's `/mnt/models`,
`--model-name NAME`), a root that cannot be served (one line), an artifact outside jax's
compatibility window (served, the worker's log says why).

The rules themselves (discovery by directories and by index.json, file:// and s3:// URLs,
single-model version and model roots, `CheckRoot`'s one-line texts, the path rule, a tampered
chunk behind a URL refused with the on-disk reason) are the front's repository and artifact
packages', unit-tested in bridge/front/repository and bridge/front/artifact.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
from bridge_helpers import golden_cases, make_repository
from jaxport.artifact import index as index_mod

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "artifact"))
from loopback_http import serving


def _flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _first_chunk(artifact: Path) -> Path:
    return sorted(p for p in (artifact / "weights").rglob("*")
                  if p.is_file() and p.name != "zarr.json")[0]


# -- a real bridge serving a repository by URL ---------------------------------------------------

def test_bridge_serves_a_repository_over_http(tmp_path: Path, artifacts: dict[str, Path]
                                              ) -> None:
    """`jaxport serve --repository http://...` on a repository behind a loopback HTTP server:
    the goldens of two models (BF16/INT64/BOOL included) through a real client; the tampered
    chunk behind the URL is refused at load with the reason the same tampering on disk gets."""
    from jaxport.client import InferenceClient
    from support.bridge import BridgeProcess
    from test_bridge_infer import assert_close  # the bridge tests' dtype tolerances

    root = make_repository(tmp_path / "repo", artifacts, {"mlp": [1], "mixed": [1]})
    shutil.copytree(artifacts["mlp"], root / "tampered" / "1")
    _flip_a_byte(_first_chunk(root / "tampered" / "1"))
    index_mod.write(root)
    with serving(root) as http, BridgeProcess(http.url) as bridge, \
            InferenceClient(bridge.address, timeout=60) as client:
        for name in ("mlp", "mixed"):
            cases = golden_cases(artifacts[name])
            for case, inputs, want in cases:
                got = client.infer(name, inputs)
                for output, value in want.items():
                    assert_close(np.asarray(got[output]), value, f"{name} {case} {output}")
        index = {(m.name, m.version): (m.state, m.reason) for m in client.repository_index()}
        assert index[("mlp", "1")] == ("READY", "") and index[("mixed", "1")] == ("READY", "")
        state, reason = index[("tampered", "1")]
        assert state == "UNAVAILABLE", index
        # The reason names the file relative to the repository, as for the same tampering on
        # disk (the equality of the two: bridge/front/artifact's HTTP store tests).
        assert reason.startswith("checksum verification failed: tampered/1/weights/"), reason
        assert "sha256 mismatch" in reason and "http" not in reason, reason
        assert "/mixed/1/manifest.json" in http.requests
        log = bridge.log_text()
    assert str(root) not in log  # nothing was read from the directory itself


def test_serve_model_name_serves_one_artifact_as_that_model(
        tmp_path: Path, artifacts: dict[str, Path]) -> None:
    """`jaxport serve --repository VERSION_DIR --model-name solo` (KServe's /mnt/models holding
    one artifact): the index lists only `solo`, which answers mlp's goldens;
    another name is NOT_FOUND naming the one known model."""
    from jaxport.client import InferenceClient, InferenceServerError
    from support.bridge import BridgeProcess

    root = tmp_path / "mnt" / "models"
    shutil.copytree(artifacts["mlp"], root)
    with BridgeProcess(root, "--model-name", "solo") as bridge, \
            InferenceClient(bridge.address, timeout=60) as client:
        assert [(m.name, m.version) for m in client.repository_index()] == [("solo", "1")]
        for _case, inputs, want in golden_cases(artifacts["mlp"]):
            got = client.infer("solo", inputs)
            for output, value in want.items():
                np.testing.assert_allclose(np.asarray(got[output]), value, rtol=1e-5, atol=1e-6)
        with pytest.raises(InferenceServerError) as info:
            client.infer("mlp", inputs)
        assert info.value.code == "NOT_FOUND"
        assert info.value.message.startswith("unknown model 'mlp'")
        assert info.value.message.endswith("(known models: solo)")


def test_serve_model_name_refuses_a_root_that_is_no_model(tmp_path: Path) -> None:
    """An empty /mnt/models with --model-name: one line naming the root and what it lacks."""
    import subprocess

    empty = tmp_path / "empty"
    empty.mkdir()
    done = subprocess.run(
        [sys.executable, "-m", "jaxport.cli", "serve", "--repository", str(empty),
         "--model-name", "solo"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"jaxport serve: error: --repository {empty} is neither an artifact")
    assert "model 'solo'" in line


def test_an_aged_artifact_loads_and_the_worker_logs_why(
        tmp_path: Path, artifacts: dict[str, Path]) -> None:
    """An artifact exported before jax's compatibility window (its manifest's exportedAt a
    year back), served by the workers (`--engine exported`: jax deserializes it): it still
    loads (jax decides whether it can read it) and answers its goldens; the log says so as a
    WARNING naming the artifact and the warning's text (the operator reads the log, not
    Python's bare warnings on stderr)."""
    from jaxport.artifact import manifest as manifest_mod
    from jaxport.client import InferenceClient
    from support.bridge import BridgeProcess

    art = tmp_path / "repo" / "old" / "1"
    shutil.copytree(artifacts["mlp"], art)
    m = manifest_mod.load(art)
    m.exported_at = "2025-11-30T00:00:00Z"  # a year before this test was written: > 183 days
    manifest_mod.write(m, art)
    with BridgeProcess(tmp_path / "repo", "--engine", "exported", "--http-port", "-1") as bridge, \
            InferenceClient(bridge.address, timeout=120) as client:
        case, inputs, want = golden_cases(artifacts["mlp"])[0]
        got = client.infer("old", inputs)
        for output, value in want.items():
            np.testing.assert_allclose(np.asarray(got[output]), value, rtol=1e-5, atol=1e-6,
                                       err_msg=case)
        records = [r for r in bridge.log_records() if r.get("msg") == "artifact compatibility"]
    assert records, bridge.log_text()[-3000:]
    (record,) = records[:1]
    assert record["level"] == "WARNING"
    assert str(art) in str(record["location"])
    assert "2025-11-30" in record["warning"] and "compatib" in record["warning"]
