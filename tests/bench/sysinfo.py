"""Machine facts and yardsticks measured in the same run: CPU model, memcpy bandwidth, the
CPU seconds and peak RSS of a process read from /proc, and of a process tree (`jaxport serve`
is the front's process and its execution workers, its children)."""

from __future__ import annotations

import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

_TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all threads) from /proc/<pid>/stat."""
    text = Path(f"/proc/{pid}/stat").read_text()
    fields = text[text.rindex(")") + 2 :].split()  # skip "pid (comm) "; comm may hold spaces
    utime, stime = int(fields[11]), int(fields[12])  # fields 14 and 15 of stat(5)
    return (utime + stime) / _TICKS


def process_tree(pid: int) -> list[int]:
    """`pid` and its live descendants (children read from /proc/<pid>/task/*/children)."""
    out = [pid]
    for pid_ in out:  # grows while it is walked: breadth first
        for task in Path(f"/proc/{pid_}").glob("task/*/children"):
            try:
                out += [int(c) for c in task.read_text().split()]
            except OSError:  # the thread or process exited meanwhile
                pass
    return out


def tree_cpu_s(pid: int) -> tuple[float, float]:
    """(CPU seconds of `pid` itself, of its live descendants): for `jaxport serve`, the front
    and its workers."""
    own, rest = 0.0, 0.0
    for i, p in enumerate(process_tree(pid)):
        try:
            cpu = process_cpu_s(p)
        except (FileNotFoundError, ProcessLookupError):
            continue
        if i == 0:
            own = cpu
        else:
            rest += cpu
    return own, rest


def process_rss_bytes(pid: int) -> tuple[int, int]:
    """(current RSS, peak RSS) of `pid` in bytes from /proc/<pid>/status."""
    cur = peak = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            cur = int(line.split()[1]) * 1024
        elif line.startswith("VmHWM:"):
            peak = int(line.split()[1]) * 1024
    return cur, peak


def memcpy_bandwidth(nbytes: int, repeats: int = 5) -> float:
    """Best-of-`repeats` bytes/s of one large copy (np.copyto: a memcpy into a warm buffer)."""
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.empty_like(src)
    np.copyto(dst, src)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        best = min(best, time.perf_counter() - t0)
    return nbytes / best


def machine() -> dict[str, Any]:
    """What the numbers were measured on."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = 0
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    except OSError:
        pass
    import grpc
    import jax

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)),
        "memory_gib": round(mem / 2**30, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "jax": jax.__version__,
        "grpcio": grpc.__version__,
        "numpy": np.__version__,
    }


def tree_rss_bytes(pid: int) -> int:
    """Resident bytes of `pid` and its live descendants together."""
    total = 0
    for p in process_tree(pid):
        try:
            total += process_rss_bytes(p)[0]
        except OSError:
            pass
    return total


def command(pid: int) -> str:
    """The command line of `pid` ("" once it exited)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except OSError:
        return ""
