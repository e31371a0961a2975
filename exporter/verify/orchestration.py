"""The parent side of `jaxport verify`: which checks run on which platforms, each in its own
fresh `python -I` process (no current directory, no PYTHONPATH: the model's source cannot be
imported), `parallel` at a time; their JSON results read back in `checks` order."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from jaxport.artifact import manifest as manifest_mod
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter.errors import ExportError
from jaxport.exporter.verify.results import CHECKS, KNOWN_PLATFORMS, PLATFORM_CHECKS, CheckResult

__all__ = ["WORKER_MODULE", "manifest_warnings", "present_platforms", "run_checks"]

# What a worker process runs (`python -I -m WORKER_MODULE`): the package's `__main__`.
WORKER_MODULE = "jaxport.exporter.verify"


def run_checks(
    artifact_dir: str | os.PathLike[str],
    *,
    checks: Sequence[str] = CHECKS,
    timeout: float = 900.0,
    parallel: int = 2,
    atol: float | None = None,
    rtol: float | None = None,
    allow_unexecuted: bool = False,
    progress: Callable[[str], None] | None = None,
) -> list[CheckResult]:
    """Run each check in its own fresh `python -I` process (`parallel` at a time).

    `progress`, when given, gets one line as the checks start (which, how many at a time)
    and one as each finishes (`[2/5] jaxexport: PASS (3.1 s)`), from the thread that ran it;
    `jaxport verify` prints them on a terminal.

    `jaxexport` and `pjrt` run once per platform of the artifact that is present here
    (`present_platforms`); their results are named `jaxexport@cuda` etc. when there are
    several. An artifact none of whose platforms is present raises ExportError naming both
    lists, unless `allow_unexecuted` (then only `checksums` runs and the execution checks are
    reported skipped). `atol`/`rtol` replace the tolerance rules for every float output
    (docs/artifact-format.md "Tolerances"). Returns the results in `checks` order.
    """
    for flag, value in (("atol", atol), ("rtol", rtol)):
        if value is not None and not (value >= 0 and math.isfinite(value)):
            raise ExportError(f"--{flag} must be a finite number >= 0, got {value}")
    root = Path(artifact_dir).resolve()
    m = manifest_mod.load(root)  # a clear one-line error before spawning anything
    for check in checks:
        if check not in CHECKS:
            raise ExportError(f"unknown check {check!r}; choose from {', '.join(CHECKS)}")
    listed = list(m.platforms)
    executing = [c for c in checks if c in PLATFORM_CHECKS]
    if progress is not None and executing:
        progress("finding the platforms present here (jax in a fresh process)")
    here = present_platforms(timeout) if executing else []
    runnable = [p for p in listed if p in here]
    skipped: dict[str, CheckResult] = {}
    if executing and not runnable:
        message = (f"none of the artifact's platforms ({', '.join(listed)}) is available here "
                   f"(present: {', '.join(here) or 'none'}), so nothing can execute the program")
        if not allow_unexecuted:
            raise ExportError(f"{message}; run verify on a machine with one of them, or pass "
                              "--allow-unexecuted to check the checksums only")
        skipped = {c: CheckResult(c, "skip", message) for c in checks if c != "checksums"}
    tasks: list[tuple[str, str]] = []
    for check in checks:
        if check in skipped:
            continue
        if check in PLATFORM_CHECKS:
            tasks += [(check, p) for p in runnable]
        else:
            tasks.append((check, "cpu"))
    labels = [f"{c}@{p}" if len(runnable) > 1 and c in PLATFORM_CHECKS else c
              for c, p in tasks]
    report = _Report(progress, len(tasks))
    if progress is not None:
        progress(f"running {len(tasks)} check(s) of {artifact_dir}, each in a fresh process, "
                 f"{max(1, min(parallel, len(tasks)))} at a time: {', '.join(labels)}"
                 + (f" ({', '.join(sorted(skipped))} skipped)" if skipped else ""))

    def run(i: int) -> CheckResult:
        started = time.monotonic()
        result = _run_worker(tasks[i][0], root, timeout, (atol, rtol), tasks[i][1])
        result.check = labels[i]
        report.finished(result, time.monotonic() - started)
        return result

    with ThreadPoolExecutor(max_workers=max(1, parallel)) as pool:
        done = list(pool.map(run, range(len(tasks))))
    by_check: dict[str, list[CheckResult]] = {}
    for (check, _), result in zip(tasks, done, strict=True):
        by_check.setdefault(check, []).append(result)
    return [r for c in checks for r in (by_check.get(c) or [skipped[c]])]


class _Report:
    """`progress` lines as checks finish, numbered in the order they finished."""

    def __init__(self, progress: Callable[[str], None] | None, total: int) -> None:
        self.progress, self.total, self.count = progress, total, 0
        self.lock = threading.Lock()

    def finished(self, result: CheckResult, seconds: float) -> None:
        if self.progress is None:
            return
        with self.lock:
            self.count += 1
            line = (f"[{self.count}/{self.total}] {result.check}: {result.status.upper()} "
                    f"({seconds:.1f} s)")
            self.progress(line)


def manifest_warnings(m: manifest_pb2.Manifest) -> list[str]:
    """One line per thing about the artifact a consumer must know before running it."""
    out = manifest_mod.compatibility_warnings(m)
    if m.allowed_custom_calls:
        out.append("verify's workers register no custom-call kernel, so their execution "
                   f"checks fail on {', '.join(m.allowed_custom_calls)}")
    return out


# Run with the caller's environment in a fresh isolated process: what a worker will find.
_PROBE = (
    "import json, jax\n"
    "found = []\n"
    f"for p in {KNOWN_PLATFORMS!r}:\n"
    "    try:\n"
    "        if jax.devices(p):\n"
    "            found.append(p)\n"
    "    except RuntimeError:\n"
    "        pass\n"
    "print(json.dumps(found))\n"
)


def present_platforms(timeout: float = 300.0) -> list[str]:
    """The jax platforms (cpu, cuda, rocm, tpu) with a device here, as a verify worker sees
    them: probed in a fresh `python -I` process with this process's environment (so
    JAX_PLATFORMS=cpu limits it to cpu)."""
    with tempfile.TemporaryDirectory(prefix="jaxport-verify-") as cwd:
        proc = subprocess.run([sys.executable, "-I", "-c", _PROBE], capture_output=True,
                              text=True, timeout=timeout, cwd=cwd, env=_worker_env())
    try:
        found = json.loads(proc.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ExportError(f"cannot list the platforms present here: jax failed to start "
                          f"(exit {proc.returncode}): {tail}") from None
    return [str(p) for p in found]


def _run_worker(check: str, root: Path, timeout: float,
                tolerance: tuple[float | None, float | None] = (None, None),
                platform: str = "cpu") -> CheckResult:
    cmd = [sys.executable, "-I", "-m", WORKER_MODULE, "--worker", check, str(root),
           "--platform", platform]
    atol, rtol = tolerance
    if atol is not None:
        cmd += ["--atol", repr(float(atol))]
    if rtol is not None:
        cmd += ["--rtol", repr(float(rtol))]
    with tempfile.TemporaryDirectory(prefix="jaxport-verify-") as cwd:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                                  cwd=cwd, env=_worker_env())
        except subprocess.TimeoutExpired:
            return CheckResult(check, "fail", f"timed out after {timeout:.0f}s")
    last = proc.stdout.strip().splitlines()[-1:] or [""]
    try:
        return CheckResult.from_json(json.loads(last[0]))
    except (ValueError, KeyError, TypeError):
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        return CheckResult(check, "fail", f"worker crashed (exit {proc.returncode}): {tail}")


def _worker_env() -> dict[str, str]:
    """The caller's environment (JAX_PLATFORMS included: it says which platforms verify may
    use), without PYTHONPATH."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # -I ignores it anyway; make the intent explicit
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    return env
