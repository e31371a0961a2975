#!/usr/bin/env python3
"""The two test tiers, phase by phase, with how long each phase took.

    .venv/bin/python tests/tiers.py fast    # `make test`: what a newcomer and the inner loop run
    .venv/bin/python tests/tiers.py all     # `make test-all`: everything (CI runs this)

fast: lint (ruff, buf lint, buf breaking), generated-code drift, every pytest test not marked
`slow` (in-process tests and live tests against `jaxport serve`'s native front), and the
conformance suite on the shipped configuration with every runner (Python sync and asyncio, Go,
Java, REST) plus the other server configurations with one runner and a few cases per other
runner (tests/conformance/run.py --tier fast).

all: the same lint and drift phases, every pytest test (the `slow` ones too: wheel installs,
real-model exports, live Hypothesis runs, the fuzz smoke), the full conformance matrix (every
runner against every server configuration), the Ray Serve / KServe suite (tests/scale) and
perf_analyzer against a live bridge.

Every phase runs even when an earlier one failed (so one run shows every failure); the exit
status is 1 if any failed. The closing table names each phase, its wall time and its result, so
a slow addition shows in the log.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
PY = sys.executable

LINT = [
    ("ruff", [str(BIN / "ruff"), "check", "."]),
    ("buf lint", [str(BIN / "buf"), "lint", "proto"]),
    ("buf breaking", [str(BIN / "buf"), "breaking", "proto", "--against",
                      "proto/baseline.binpb"]),
    ("generated-code drift", [PY, "proto/generate.py", "--check"]),
]
PYTEST = [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
#: Two pytest processes (pytest-xdist), a test file each at a time: most live tests wait on a
#: server or a subprocess, so two keep both cores busy; session fixtures run once per process.
#: The 15 slowest tests are listed, so a slow addition shows.
PARALLEL = ["-n", "2", "--dist", "loadfile", "--durations=15"]

PHASES = {
    "fast": [
        *LINT,
        ("pytest (not slow)", [*PYTEST, *PARALLEL, "-m", "not slow and not soak"]),
        ("conformance (shipped configuration, every runner)",
         [PY, "tests/conformance/run.py", "--tier", "fast"]),
    ],
    "all": [
        *LINT,
        ("pytest (every test but the soak)", [*PYTEST, *PARALLEL, "-m", "not soak"]),
        ("conformance (every configuration, every runner)",
         [PY, "tests/conformance/run.py", "--tier", "all"]),
        ("scale (Ray Serve cluster, KServe runtime)",
         [*PYTEST, "-o", "addopts=", "--timeout=900", "tests/scale/scale_ray.py",
          "tests/scale/kserve_crds.py"]),
        ("perf_analyzer", [*PYTEST, "-o", "addopts=", "tests/bridge/perf_analyzer_run.py"]),
    ],
}


def main(argv: list[str]) -> int:
    if len(argv) != 1 or argv[0] not in PHASES:
        print(f"usage: tiers.py {{{'|'.join(PHASES)}}}", file=sys.stderr)
        return 2
    tier = argv[0]
    rows: list[tuple[str, float, int]] = []
    start = time.perf_counter()
    for name, cmd in PHASES[tier]:
        print(f"\n##### {tier}: {name}: {' '.join(cmd)}", flush=True)
        t0 = time.perf_counter()
        rc = subprocess.run(cmd, cwd=REPO).returncode
        rows.append((name, time.perf_counter() - t0, rc))
    total = time.perf_counter() - start
    width = max(len(n) for n, _, _ in rows)
    print(f"\n##### make {'test' if tier == 'fast' else 'test-all'}: phases")
    for name, seconds, rc in rows:
        print(f"  {name:<{width}}  {seconds:7.1f} s  {'ok' if rc == 0 else f'FAILED (exit {rc})'}")
    print(f"  {'total':<{width}}  {total:7.1f} s")
    failed = [n for n, _, rc in rows if rc != 0]
    if failed:
        print(f"tiers: {tier}: failed phases: {', '.join(failed)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
