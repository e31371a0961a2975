"""`jaxport serve --repository s3://BUCKET/PREFIX` (issue 28 item 8): a real `jaxport serve`
serving a repository from a real S3-compatible server (moto's server mode,
tests/artifact/moto_s3.py) on 127.0.0.1, listed by its index.json as a repository by HTTP is.
The goldens through a real client equal the local copy's; a tampered chunk is refused naming
the file relative to the repository (never the endpoint); a missing bucket and a request
without credentials stop `jaxport serve` with one line each. The store's rules (SigV4,
credentials, the on-disk reason for the same tampering) are bridge/front/artifact's, unit-tested
there against the same moto server."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
from bridge_helpers import golden_cases, make_repository
from jaxport.artifact import index as index_mod
from support.bridge import BridgeProcess, serve_command

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "artifact"))
from moto_s3 import AWS_VARS, s3_serving


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """This process's environment without AWS settings (no shared files either), plus extra."""
    clean = {k: v for k, v in os.environ.items()
             if k not in AWS_VARS and not k.startswith("JAXPORT_")}
    return {**clean, "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-credentials"),
            "AWS_CONFIG_FILE": str(tmp_path / "no-config"), **extra}


def _first_chunk(artifact: Path) -> Path:
    return sorted(p for p in (artifact / "weights").rglob("*")
                  if p.is_file() and p.name != "zarr.json")[0]


def test_bridge_serves_a_repository_from_s3(tmp_path: Path, artifacts: dict[str, Path]) -> None:
    from jaxport.client import InferenceClient
    from test_bridge_infer import assert_close  # the bridge tests' dtype tolerances

    root = make_repository(tmp_path / "repo", artifacts, {"mlp": [1], "mixed": [1]})
    shutil.copytree(artifacts["mlp"], root / "tampered" / "1")
    chunk = _first_chunk(root / "tampered" / "1")
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    index_mod.write(root)
    with s3_serving(root) as s3:
        shutil.rmtree(root)  # every file now comes from the bucket
        env = _env(tmp_path, **s3.env)
        with BridgeProcess(s3.url, env=env) as bridge, \
                InferenceClient(bridge.address, timeout=60) as client:
            for name in ("mlp", "mixed"):
                for case, inputs, want in golden_cases(artifacts[name]):
                    got = client.infer(name, inputs)
                    for output, value in want.items():
                        assert_close(np.asarray(got[output]), value, f"{name} {case} {output}")
            index = {(m.name, m.version): (m.state, m.reason)
                     for m in client.repository_index()}
            log = bridge.log_text()
    assert index[("mlp", "1")] == ("READY", "") and index[("mixed", "1")] == ("READY", "")
    state, reason = index[("tampered", "1")]
    assert state == "UNAVAILABLE", index
    assert reason.startswith("checksum verification failed: tampered/1/weights/"), reason
    assert "sha256 mismatch" in reason
    assert s3.endpoint not in reason and "s3://" not in reason
    assert "AWS_ERROR" not in log  # keys from the environment: no credential chain's noise


def _serve(url: str, env: dict[str, str]) -> tuple[int, list[str]]:
    done = subprocess.run([*serve_command(), "--repository", url, "--port", "0"],
                          capture_output=True, text=True, timeout=120, env=env)
    return done.returncode, done.stderr.strip().splitlines()


def test_missing_bucket_and_no_credentials_are_one_line(tmp_path: Path,
                                                        artifacts: dict[str, Path]) -> None:
    root = make_repository(tmp_path / "repo", artifacts, {"mlp": [1]})
    index_mod.write(root)
    with s3_serving(root) as s3:
        code, lines = _serve("s3://no-such-bucket/repo", _env(tmp_path, **s3.env))
        assert (code, lines) == (2, [
            "jaxport serve: error: --repository s3://no-such-bucket/repo: "
            "s3://no-such-bucket/repo/index.json: no such bucket 'no-such-bucket' at "
            f"{s3.endpoint}"])
        code, lines = _serve(s3.url, _env(tmp_path, AWS_ENDPOINT_URL_S3=s3.endpoint,
                                          AWS_REGION="us-east-1"))
        assert (code, lines) == (2, [
            f"jaxport serve: error: --repository {s3.url}: {s3.url}/index.json: cannot read: "
            "access denied (HTTP 403) to bucket 'models' with no credentials (unsigned: set "
            "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)"])
        code, lines = _serve(s3.url + "/nothing-here", _env(tmp_path, **s3.env))
        assert code == 2 and len(lines) == 1 and "no index.json" in lines[0], lines
