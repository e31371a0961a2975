#!/usr/bin/env python3
"""The two test tiers, phase by phase, with how long each phase took.

    .venv/bin/python tests/tiers.py fast          # `make test`: the inner loop (README tier table)
    .venv/bin/python tests/tiers.py all           # `make test-all`: everything (CI runs this)
    .venv/bin/python tests/tiers.py pytest ARGS   # build, then pytest ARGS with the same set-up
    .venv/bin/python tests/tiers.py build [fast|all]   # only the builds

Phases (tests/README.md says the rules they hold the tests to):

1. lint: ruff, buf lint, buf breaking, generated-code drift;
2. build: every program the tests run, built ONCE here (the independent builds at the same
   time) and handed over by environment variable
   (tests/support/binaries.py: the front and jaxport-native-goldens of `make setup`, the Go
   conformance runner and example, the bench's wire tool, the engine's Go test binary, the Java
   client + runner compiled (and its JUnit tests run) by one Maven call, the C++ library; for
   tier all also Jaeger, the OTLP receiver of the tracing tests). No test builds anything; one
   whose program is missing fails naming its variable;
3. go: `go vet` and the unit tests of every Go module (bridge/front: the serving rules of the
   one server; clients/go; tests/bench/wire);
4. pytest: three processes (pytest-xdist, a file each); fast: every test not marked `slow`. The
   test models come from the shared export cache (tests/support/exports.py, JAXPORT_TEST_EXPORTS),
   so each is exported once and reused while its sources do not change;
5. conformance (tests/conformance/run.py --tier): fast = every runner (Python sync and asyncio,
   Go, Java, REST) over every case against the shipped configuration, the other configurations
   (workers only, engine pjrt, mTLS + token and the refusal without a client certificate) with
   one runner over every case; all = every runner over every case everywhere;
6. all only: the Ray Serve / KServe suite (tests/scale) and perf_analyzer, at the same time as
   the conformance phase (each waits mostly on the servers it starts; each one's output is
   printed when it ends).

Every phase runs even when an earlier one failed (one run shows every failure); the exit status
is 1 if any failed. The closing table names each phase, its wall time and its result, and the
pytest phase lists every test over the fast tier's budget (BUDGET_S, set-up included), so a slow
addition shows in the log: mark it `slow` with its reason (tests/README.md). The pytest phase's
JUnit report, every test's time, stays in build/test-reports/pytest-TIER.xml.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support import binaries, exports  # noqa: E402

BIN = Path(sys.executable).parent
#: The pytest phase's JUnit report (every test's time, set-up included) stays here after a run.
REPORTS = REPO / "build" / "test-reports"
PY = sys.executable
#: A fast-tier test (set-up included) longer than this is listed after the pytest phase.
BUDGET_S = 10.0

LINT = [
    ("ruff", [str(BIN / "ruff"), "check", "."]),
    ("buf lint", [str(BIN / "buf"), "lint", "proto"]),
    ("buf breaking", [str(BIN / "buf"), "breaking", "proto", "--against",
                      "proto/baseline.binpb"]),
    ("generated-code drift", [PY, "proto/generate.py", "--check"]),
]
GO = [
    ("go vet + unit tests (bridge/front)", "bridge/front"),
    ("go vet + unit tests (clients/go)", "clients/go"),
    ("go vet (tests/bench/wire)", "tests/bench/wire"),
]
PYTEST = [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
#: Three pytest processes (pytest-xdist), a test file each at a time: most live tests wait on a
#: server or a subprocess, so a third process fills the two cores while the others wait (fast
#: tier, 2 cores, set-up done, 2026-12-02: pytest 263 s with three, 272 s with two, the same CPU
#: time); session fixtures run once per process.
PARALLEL = ["-n", "3", "--dist", "loadfile", "--durations=15"]
MARKS = {"fast": "not slow and not soak", "all": "not soak"}
#: A phase: its name and what runs it (env -> exit status; a command phase, which can run beside
#: others, also takes the file its output goes to).
Phase = tuple[str, Callable[..., int]]


def test_environment(tier: str) -> dict[str, str]:
    """What every test process gets: the handed-over programs, the export cache, and this
    interpreter as the workers' Python (the Go tests start real workers). Python may write its
    bytecode cache even where the caller's environment says not to (PYTHONDONTWRITEBYTECODE):
    a tier starts hundreds of Python processes, each of which would otherwise compile jaxport
    and pytest's rewritten test modules again (fast tier, 2 cores: pytest 183 s -> 167 s)."""
    env = {**os.environ, **binaries.environment(tier),
           exports.ENV: str(exports.cache_root()),
           "JAXPORT_WORKER_PYTHON": PY}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run(cmd: list[str], env: dict[str, str], cwd: Path = REPO, out: IO[str] | None = None) -> int:
    """Run `cmd`; its output goes to this process's, or to `out` (both streams) when given."""
    return subprocess.run(cmd, cwd=cwd, env=env, stdout=out,
                          stderr=subprocess.STDOUT if out else None).returncode


def build_phase(tier: str) -> Callable[[dict[str, str]], int]:
    def phase(env: dict[str, str]) -> int:
        failures = binaries.build_all(tier)
        for line in failures:
            print(f"tiers: build: {line}", flush=True)
        return 1 if failures else 0
    return phase


def go_phase(module: str) -> Callable[[dict[str, str]], int]:
    def phase(env: dict[str, str]) -> int:
        cwd = REPO / module
        rc = run(["go", "vet", "./..."], env, cwd)
        if module != "tests/bench/wire":
            # -vet=off: `go vet` above ran every analyzer; go test's own vet is a subset of them.
            rc = run(["go", "test", "-vet=off", "./..."], env, cwd) or rc
        return rc
    return phase


def over_budget(junit: Path, budget: float = BUDGET_S) -> list[tuple[float, str]]:
    """(seconds, test id) of every test in a JUnit report that took longer than `budget`."""
    if not junit.exists():
        return []
    out = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        seconds = float(case.get("time") or 0)
        if seconds > budget:
            path = case.get("classname", "").replace(".", "/")
            out.append((seconds, f"{path}.py::{case.get('name')}"))
    return sorted(out, reverse=True)


def pytest_phase(tier: str) -> Callable[[dict[str, str]], int]:
    def phase(env: dict[str, str]) -> int:
        junit = REPORTS / f"pytest-{tier}.xml"
        junit.parent.mkdir(parents=True, exist_ok=True)
        junit.unlink(missing_ok=True)
        rc = run([*PYTEST, *PARALLEL, "-m", MARKS[tier], f"--junitxml={junit}",
                  "-o", "junit_duration_report=total"], env)
        slow = over_budget(junit)
        if tier == "fast":
            print(f"\n##### fast-tier tests over the {BUDGET_S:.0f} s budget (set-up included): "
                  f"{len(slow)}")
            for seconds, name in slow:
                print(f"  {seconds:7.1f} s  {name}")
            if slow:
                print("  (a test that stays over the budget on a quiet machine belongs in the "
                      "slow tier: mark it slow with its reason, tests/README.md)")
        return rc
    return phase


def command(cmd: list[str]) -> Callable[..., int]:
    return lambda env, out=None: run(cmd, env, out=out)


def phases(tier: str) -> list[Phase | list[Phase]]:
    out = [(name, command(cmd)) for name, cmd in LINT]
    # One after the other: run together the builds and the Go tests took as long (fresh clone,
    # 2 cores, 2026-12-07: 74 s together, 43 s + 31 s apart): both keep the two cores busy.
    out.append((f"build ({tier})", build_phase(tier)))
    out += [(name, go_phase(module)) for name, module in GO]
    if tier == "fast":
        out.append(("pytest (not slow)", pytest_phase(tier)))
        out.append(("conformance (every runner on the shipped configuration, one on the others)",
                    command([PY, "tests/conformance/run.py", "--tier", "fast"])))
        return out
    out.append(("pytest (every test but the soak)", pytest_phase(tier)))
    # These three wait mostly on servers they start (a Ray cluster, four bridges, a bridge under
    # perf_analyzer's load): they run at the same time, each one's output printed when it ends.
    out.append([
        ("conformance (every configuration, every runner)",
         command([PY, "tests/conformance/run.py", "--tier", "all"])),
        ("scale (Ray Serve cluster, KServe runtime)",
         command([*PYTEST, "-o", "addopts=", "--timeout=900", "tests/scale/scale_ray.py",
                  "tests/scale/kserve_crds.py"])),
        ("perf_analyzer",
         command([*PYTEST, "-o", "addopts=", "tests/bridge/perf_analyzer_run.py"])),
    ])
    return out


def run_together(tier: str, group: list[Phase], env: dict[str, str]
                 ) -> list[tuple[str, float, int]]:
    """Run the phases of `group` at the same time; each one's output is printed, under its
    heading, when it ends. Their rows (name, wall time, exit status)."""
    lock = threading.Lock()
    names = ", ".join(name for name, _ in group)
    print(f"\n##### {tier}: at the same time: {names}", flush=True)

    def one(phase: Phase) -> tuple[str, float, int]:
        name, fn = phase
        with tempfile.TemporaryFile("w+") as out:
            t0 = time.perf_counter()
            rc = fn(env, out)
            seconds = time.perf_counter() - t0
            out.seek(0)
            text = out.read()
        with lock:
            print(f"\n##### {tier}: {name} ({seconds:.1f} s, beside the others)", flush=True)
            print(text, end="", flush=True)
        return name, seconds, rc

    with ThreadPoolExecutor(max_workers=len(group)) as pool:
        return list(pool.map(one, group))


def run_phases(tier: str, todo: list[Phase | list[Phase]]) -> int:
    env = test_environment(tier)
    rows: list[tuple[str, float, int]] = []
    start = time.perf_counter()
    for item in todo:
        if isinstance(item, list):
            rows += run_together(tier, item, env)
            continue
        name, phase = item
        print(f"\n##### {tier}: {name}", flush=True)
        t0 = time.perf_counter()
        rc = phase(env)
        rows.append((name, time.perf_counter() - t0, rc))
    total = time.perf_counter() - start
    width = max(len(n) for n, _, _ in rows)
    print(f"\n##### {tier}: phases (load average at the end: "
          f"{', '.join(f'{x:.1f}' for x in os.getloadavg())})")
    for name, seconds, rc in rows:
        print(f"  {name:<{width}}  {seconds:7.1f} s  {'ok' if rc == 0 else f'FAILED (exit {rc})'}")
    print(f"  {'total':<{width}}  {total:7.1f} s")
    failed = [n for n, _, rc in rows if rc != 0]
    if failed:
        print(f"tiers: {tier}: failed phases: {', '.join(failed)}")
        return 1
    return 0


USAGE = "usage: tiers.py {fast|all} | tiers.py build [fast|all] | tiers.py pytest [PYTEST ARGS]"


def main(argv: list[str]) -> int:
    if argv[:1] == ["pytest"]:
        env = test_environment("all")
        failures = binaries.build_all("all")
        for line in failures:
            print(f"tiers: build: {line}", file=sys.stderr)
        if failures:
            return 1
        return run([*PYTEST, *argv[1:]], env)
    if argv[:1] == ["build"] and len(argv) <= 2 and (argv[1:] or ["fast"])[0] in MARKS:
        tier = (argv[1:] or ["fast"])[0]
        return run_phases(tier, [(f"build ({tier})", build_phase(tier))])
    if len(argv) != 1 or argv[0] not in MARKS:
        print(USAGE, file=sys.stderr)
        return 2
    return run_phases(argv[0], phases(argv[0]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
