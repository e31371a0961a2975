"""The C++ library's ctest (unit, golden and concurrency tests) built with AddressSanitizer and
UndefinedBehaviorSanitizer (`make cpp-asan`: build/cpp-asan, -fsanitize=address,undefined
-fno-sanitize-recover=all, -O1 -g): any error report fails the run. LeakSanitizer runs at exit
with no suppression (the plugin's state stays reachable from its globals; measured: nothing
reported). jaxport-pjrt-run of the same build then runs every golden of the checked, bucketed
and batched artifacts and a --input run. Slow (a second build of everything): the second tier.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cpp_env import PLUGIN, REPO, golden_env, make

pytestmark = pytest.mark.slow

ASAN_BUILD = REPO / "build" / "cpp-asan"


def test_ctest_under_address_and_undefined_behavior_sanitizers(
    cpp_artifacts: Path, tmp_path: Path
) -> None:
    make("pjrt-plugin", "cpp-asan")
    cache = (ASAN_BUILD / "CMakeCache.txt").read_text()
    assert "JAXPORT_SANITIZE:STRING=address,undefined" in cache
    env = {
        **golden_env(cpp_artifacts),
        "ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0:halt_on_error=1:strict_string_checks=1",
        "UBSAN_OPTIONS": "print_stacktrace=1:halt_on_error=1",
    }
    env.pop("LD_PRELOAD", None)
    done = subprocess.run(
        ["ctest", "--test-dir", str(ASAN_BUILD), "--output-on-failure", "--timeout", "900"],
        capture_output=True,
        text=True,
        timeout=1800,
        env=env,
    )
    report = done.stdout[-12000:] + done.stderr[-2000:]
    assert done.returncode == 0, report
    assert "ERROR: AddressSanitizer" not in done.stdout and "runtime error:" not in done.stdout, (
        report
    )
    passed = re.search(r"100% tests passed, 0 tests failed out of (\d+)", done.stdout)
    assert passed and int(passed.group(1)) >= 30, report

    tool = ASAN_BUILD / "jaxport-pjrt-run"
    for which in ("checked", "bucketed", "batched"):
        done = subprocess.run(
            [str(tool), "--plugin", str(PLUGIN), str(cpp_artifacts / which)],
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
        )
        assert done.returncode == 0, which + ": " + done.stdout[-4000:] + done.stderr[-4000:]
        assert "Sanitizer" not in done.stderr and "runtime error:" not in done.stderr, done.stderr
    np.save(tmp_path / "x.npy", np.linspace(-1, 1, 3 * 16, dtype=np.float32).reshape(3, 16))
    done = subprocess.run(
        [
            str(tool),
            "--plugin",
            str(PLUGIN),
            str(cpp_artifacts / "batched"),
            "--input",
            f"x={tmp_path / 'x.npy'}",
            "--output-dir",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert np.load(tmp_path / "out" / "probs.npy").shape == (3, 3)
