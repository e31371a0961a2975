"""The C++ library's own tests (tests/cpp/*_test.cc, GoogleTest through ctest) run from pytest
on the build `make cpp` made, plus what only Python can judge:

- ctest's `unit` label (no plugin): manifest, path rule, zarr3, .npy, check messages, program
  choice and padding, compile options;
- the compile options' bytes parsed by XLA's own CompileOptions (jaxlib): a real
  CompileOptionsProto with JAX's CPU semantics;
- the C++ check-message formatter on 4000 fresh random payloads and templates whose expected
  text is Python's (the same fixed-seed cases the server's Go formatter is held to:
  tests/front/test_native_checks.py);
- ctest's `golden` label: every golden of the test artifacts through the plugin, and
  concurrent Run against a sequential run.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
from pathlib import Path

from cpp_env import REPO, golden_env


def _ctest(
    build: Path, label: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["ctest", "--test-dir", str(build), "-L", label, "--output-on-failure", "--timeout", "600"],
        capture_output=True,
        text=True,
        timeout=900,
        env=env,
    )


def test_unit_tests_pass(cpp_build: Path) -> None:
    done = _ctest(cpp_build, "unit")
    assert done.returncode == 0, done.stdout[-8000:] + done.stderr[-2000:]
    passed = re.search(r"100% tests passed, 0 tests failed out of (\d+)", done.stdout)
    assert passed and int(passed.group(1)) >= 30, done.stdout[-3000:]


def test_compile_options_are_what_xla_reads(cpp_build: Path, tmp_path: Path) -> None:
    from jax._src.lib import xla_client

    out = tmp_path / "compile_options.binpb"
    done = subprocess.run(
        [str(cpp_build / "tests" / "jaxport_unit_tests"), "--gtest_filter=CompileOptions.*"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"JAXPORT_COMPILE_OPTIONS_OUT": str(out), "PATH": "/usr/bin:/bin"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    options = xla_client.CompileOptions.ParseFromString(out.read_bytes())
    assert options.num_replicas == 1 and options.num_partitions == 1
    assert options.compile_portable_executable is True
    assert options.executable_build_options.num_replicas == 1
    assert list(options.env_option_overrides) == [("xla_cpu_enable_fast_min_max", False)]


def _native_checks_module():
    path = REPO / "tests" / "front" / "test_native_checks.py"
    spec = importlib.util.spec_from_file_location("native_checks_cases", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_check_formatter_matches_python_on_random_payloads(cpp_build: Path, tmp_path: Path) -> None:
    cases_mod = _native_checks_module()
    cases = cases_mod.parity_cases(seed=cases_mod.PARITY_SEED, n=cases_mod.PARITY_CASES)
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(cases))
    done = subprocess.run(
        [
            str(cpp_build / "tests" / "jaxport_unit_tests"),
            "--gtest_filter=CheckMessages.PythonParity",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={"JAXPORT_CHECK_PARITY": str(path), "PATH": "/usr/bin:/bin"},
    )
    failing = sorted({int(m) for m in re.findall(r"case (\d+): ", done.stdout)})
    report = "\n".join(
        f"seed {cases_mod.PARITY_SEED} case {i}: {json.dumps(cases[i])}" for i in failing[:20]
    )
    assert done.returncode == 0, report + "\n" + done.stdout[-6000:]
    stats = json.loads(re.search(r"check parity: (\{.*\})", done.stdout).group(1))
    assert stats["cases"] == len(cases) and stats["compared"] > 0.5 * len(cases), stats


def test_goldens_and_concurrency(cpp_build: Path, cpp_artifacts: Path) -> None:
    done = _ctest(cpp_build, "golden", golden_env(cpp_artifacts))
    assert done.returncode == 0, done.stdout[-10000:] + done.stderr[-2000:]
    assert "100% tests passed" in done.stdout
