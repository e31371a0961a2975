"""A CMake project outside the jaxport tree (tests/cpp/consumer) links the C++ library the three
ways a C++ shop does, runs the batched artifact on its own three rows (no exported batch size:
padded to 4 and cut back) and writes them and the scores as .npy, which must equal JAX's run of
the same artifact (jax.export's program, jaxport.artifact) within float32's tolerance:

- `find_package(jaxport)` from a prefix `cmake --install build/cpp` filled;
- `add_subdirectory(<checkout>/clients/cpp)`;
- `FetchContent` of a source archive of clients/cpp (URL + SHA256).

Slow (three builds of the library): the second tier. The example in docs/cpp.md is the
consumer's score.h, checked here too (fast).
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import pytest
from cpp_env import HERE, PLUGIN, REPO

CONSUMER = HERE / "consumer"
GENERATOR = ["-G", "Ninja"] if shutil.which("ninja") else []


def _build(tmp_path: Path, *defines: str) -> Path:
    """Configures and builds the consumer into tmp_path/build; the `score` binary."""
    build = tmp_path / "build"
    for cmd in (
        [
            "cmake",
            "-S",
            str(CONSUMER),
            "-B",
            str(build),
            *GENERATOR,
            "-DCMAKE_BUILD_TYPE=Release",
            *defines,
        ],
        ["cmake", "--build", str(build), "--parallel", "2"],
    ):
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-4000:]
    return build / "score"


def _score_matches_jax(score: Path, artifact: Path, out: Path) -> None:
    import jaxport.artifact

    out.mkdir()
    done = subprocess.run(
        [str(score), str(PLUGIN), str(artifact), str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "scored 3 rows with example (batch sizes 1..4)" in done.stdout
    x = np.load(out / "x.npy")
    assert x.shape == (3, 16) and x.dtype == np.float32
    padded = np.concatenate([x, x[-1:]])  # batch size 4, jax's own program
    want = jaxport.artifact.open(artifact).call(x=padded)["probs"][:3]
    got = np.load(out / "probs.npy")
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_installed_package(cpp_build: Path, cpp_artifacts: Path, tmp_path: Path) -> None:
    prefix = tmp_path / "prefix"
    done = subprocess.run(
        ["cmake", "--install", str(cpp_build), "--prefix", str(prefix)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert (prefix / "lib" / "cmake" / "jaxport" / "jaxportConfig.cmake").is_file()
    assert (prefix / "include" / "jaxport" / "model.h").is_file()
    assert not list(prefix.rglob("pjrt_c_api.h"))  # the public headers need no PJRT header
    assert (prefix / "bin" / "jaxport-pjrt-run").is_file()
    score = _build(tmp_path, "-DJAXPORT_VIA=package", f"-DCMAKE_PREFIX_PATH={prefix}")
    cache = (score.parent / "CMakeCache.txt").read_text()
    assert f"jaxport_DIR:PATH={prefix}/lib/cmake/jaxport" in cache
    _score_matches_jax(score, cpp_artifacts / "batched", tmp_path / "out")


@pytest.mark.slow
def test_add_subdirectory(cpp_artifacts: Path, tmp_path: Path) -> None:
    score = _build(tmp_path, "-DJAXPORT_VIA=subdirectory", f"-DJAXPORT_SOURCE_DIR={REPO}")
    cache = (score.parent / "CMakeCache.txt").read_text()
    assert "JAXPORT_BUILD_TESTS:BOOL=OFF" in cache  # not the top-level project: no tests
    _score_matches_jax(score, cpp_artifacts / "batched", tmp_path / "out")


@pytest.mark.slow
def test_fetchcontent(cpp_artifacts: Path, tmp_path: Path) -> None:
    archive = tmp_path / "jaxport-src.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(REPO / "clients" / "cpp", arcname="jaxport/clients/cpp")
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    score = _build(
        tmp_path,
        "-DJAXPORT_VIA=fetchcontent",
        f"-DJAXPORT_URL=file://{archive}",
        f"-DJAXPORT_SHA256={digest}",
    )
    _score_matches_jax(score, cpp_artifacts / "batched", tmp_path / "out")


def test_docs_example_is_the_consumers_code() -> None:
    """docs/cpp.md leads with tests/cpp/consumer/score.h, verbatim (the code the slow tests
    build and run), and shows the consumer's CMake lines."""
    doc = (REPO / "docs" / "cpp.md").read_text()
    blocks = re.findall(r"```c\+\+\n(.*?)```", doc, re.S)
    assert blocks and blocks[0] == (CONSUMER / "score.h").read_text()
    cmake = re.findall(r"```cmake\n(.*?)```", doc, re.S)
    consumer_cmake = (CONSUMER / "CMakeLists.txt").read_text()
    for line in (
        "find_package(jaxport 0.1 REQUIRED)",
        "target_link_libraries(score PRIVATE jaxport::jaxport)",
    ):
        assert line in consumer_cmake and any(line in block for block in cmake), line
