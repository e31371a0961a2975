"""The guards around proto/: buf lint, buf breaking against the baseline, generated-code drift.

That the real tree passes them is `make lint` / `make check-generate` (phases of both test
tiers, tests/tiers.py), not repeated here; these tests show each guard catches what it must.

Every negative case runs on a copy in a temp dir; the real tree is never touched.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BUF = Path(sys.executable).parent / "buf"
# The Python outputs: the protocol's stubs (client package), the manifest's (artifact package).
GEN_DIR = Path("clients/python/jaxport/protocol/gen")
ARTIFACT_GEN_DIR = Path("clients/python/artifact/gen")
# On copies only the Python generators run (the copy holds proto/ and the Python output only).
GENERATE_PY = [sys.executable, "proto/generate.py", "--only", "python"]


def _run(cmd: list[str | Path], cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def proto_copy(tmp_path: Path) -> Path:
    """A copy of the repository's proto/ and generated Python, laid out like the repo."""
    shutil.copytree(REPO / "proto", tmp_path / "proto")
    for gen_dir in (GEN_DIR, ARTIFACT_GEN_DIR):
        shutil.copytree(
            REPO / gen_dir, tmp_path / gen_dir, ignore=shutil.ignore_patterns("__pycache__")
        )
    return tmp_path


def test_buf_lint_still_checks_inference_outside_the_fixed_names(proto_copy: Path) -> None:
    """The exceptions for inference/ are narrow: a badly named new field is still caught."""
    path = proto_copy / "proto/inference/grpc_service.proto"
    text = path.read_text()
    old = "message ServerLiveResponse {\n  bool live = 1;"
    assert old in text
    path.write_text(text.replace(old, old + "\n  bool isLive = 2;"))
    done = _run([BUF, "lint", "proto"], cwd=proto_copy)
    assert done.returncode != 0
    assert "isLive" in done.stdout


def test_changing_a_field_number_is_a_breaking_change(proto_copy: Path) -> None:
    path = proto_copy / "proto/inference/grpc_service.proto"
    text = path.read_text()
    old = "  repeated bytes raw_input_contents = 7;"
    assert old in text
    path.write_text(text.replace(old, "  repeated bytes raw_input_contents = 8;"))
    done = _run(
        [BUF, "breaking", "proto", "--against", REPO / "proto/baseline.binpb"], cwd=proto_copy
    )
    assert done.returncode != 0
    assert "ModelInferRequest" in done.stdout and "7" in done.stdout, done.stdout


def test_changing_a_manifest_field_number_is_a_breaking_change(proto_copy: Path) -> None:
    path = proto_copy / "proto/jaxport/v1/manifest.proto"
    text = path.read_text()
    old = "  uint32 schema_version = 1;"
    assert old in text
    # Renumber to a number no field uses yet, so the only error is the breaking change.
    used = {int(n) for n in re.findall(r"= (\d+);", text)}
    free = max(used) + 1
    path.write_text(text.replace(old, f"  uint32 schema_version = {free};"))
    done = _run(
        [BUF, "breaking", "proto", "--against", REPO / "proto/baseline.binpb"], cwd=proto_copy
    )
    assert done.returncode != 0
    assert "schema_version" in done.stdout, done.stdout


def test_check_passes_on_an_untouched_copy(proto_copy: Path) -> None:
    done = _run([*GENERATE_PY, "--check"], cwd=proto_copy)
    assert done.returncode == 0, done.stderr


def test_hand_edited_generated_file_fails_the_check(proto_copy: Path) -> None:
    edited = proto_copy / GEN_DIR / "inference/grpc_service_pb2.pyi"
    edited.write_text(edited.read_text() + "# hand edit\n")
    done = _run([*GENERATE_PY, "--check"], cwd=proto_copy)
    assert done.returncode == 1
    assert "inference/grpc_service_pb2.pyi" in done.stderr
    assert "make generate" in done.stderr


def test_missing_and_stale_generated_files_fail_the_check(proto_copy: Path) -> None:
    (proto_copy / GEN_DIR / "inference/model_config_pb2.py").unlink()
    (proto_copy / GEN_DIR / "inference/old_pb2.py").write_text("")
    done = _run([*GENERATE_PY, "--check"], cwd=proto_copy)
    assert done.returncode == 1
    assert "missing (not generated yet): inference/model_config_pb2.py" in done.stderr
    assert "stale (no longer generated): inference/old_pb2.py" in done.stderr


def test_proto_edit_without_regenerating_fails_the_check(proto_copy: Path) -> None:
    path = proto_copy / "proto/inference/grpc_service.proto"
    path.write_text(path.read_text().replace("message ServerLiveRequest {}",
                                             "message ServerLiveRequest {\n  string why = 1;\n}"))
    done = _run([*GENERATE_PY, "--check"], cwd=proto_copy)
    assert done.returncode == 1
    assert "grpc_service_pb2.py" in done.stderr


def test_regenerate_restores_the_committed_output(proto_copy: Path) -> None:
    edited = proto_copy / ARTIFACT_GEN_DIR / "manifest_pb2.py"
    edited.write_text("broken\n")
    assert _run(GENERATE_PY, cwd=proto_copy).returncode == 0
    assert edited.read_bytes() == (REPO / ARTIFACT_GEN_DIR / "manifest_pb2.py").read_bytes()
    assert _run([*GENERATE_PY, "--check"], cwd=proto_copy).returncode == 0


def test_the_manifest_schema_is_generated_into_the_artifact_package_only(
    proto_copy: Path,
) -> None:
    """The client distribution carries the protocol, not the artifact format: a manifest
    module left in the client's generated tree is stale, and regenerating removes it with its
    directories."""
    assert not (REPO / GEN_DIR / "jaxport").exists()
    stale = proto_copy / GEN_DIR / "jaxport/v1/manifest_pb2.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("")
    (stale.parent / "__pycache__").mkdir()
    done = _run([*GENERATE_PY, "--check"], cwd=proto_copy)
    assert done.returncode == 1
    assert f"{GEN_DIR}: stale (no longer generated): jaxport/v1/manifest_pb2.py" in done.stderr
    assert _run(GENERATE_PY, cwd=proto_copy).returncode == 0
    assert not (proto_copy / GEN_DIR / "jaxport").exists()
    assert (proto_copy / ARTIFACT_GEN_DIR / "manifest_pb2.py").is_file()


def test_a_proto_no_python_generator_takes_is_refused(proto_copy: Path) -> None:
    (proto_copy / "proto/other").mkdir()
    (proto_copy / "proto/other/x.proto").write_text('syntax = "proto3";\npackage other;\n')
    done = _run([*GENERATE_PY, "--check"], cwd=proto_copy)
    assert done.returncode == 1
    assert "proto/other/x.proto is taken by 0 python generators (none)" in done.stderr
