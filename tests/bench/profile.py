"""Where the one server's CPU goes per request: `perf record -a -g` while ghz drives
`jaxport-front` (built from this tree; or `--echo`: the grpc-go echo server of `make bench`, the
floor) serving one bench model, then the server's samples split by what their stacks are in
(the PJRT plugin's execute, the front's request parsing, handler and response, gRPC's read and
write paths, Go's GC and scheduler), each as a share and as us of CPU per request (the server's
CPU over the recorded seconds, from /proc, divided by the requests ghz completed in them), its
hottest functions, and for the front the model's ModelStatistics over the run (server-side
queue / execute wall time per request). docs/performance.md, "Where the time goes", was
measured with it.

System-wide (`-a`, the server's process picked out by PID) rather than `-p PID`: per-task
sampling arms and disarms a timer at every context switch of every thread, which on this VM
(no hardware counters: perf samples `cpu-clock`) doubled the front's CPU per request at c=16.
The front is Go with frame pointers, so perf unwinds its stacks; the plugin is stripped (its
time shows under its .so, its allocations under libc).

    .venv/bin/python -m tests.bench.profile [--model mlp8] [--concurrency 16] [--seconds 8]
        [--echo] [-- extra jaxport-front flags]

Needs `perf` (linux-perf) and root or perf_event_paranoid <= 0 for `-a`; prints, never asserts.
"""

from __future__ import annotations

import argparse
import collections
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from tests.bench import ghz, models, servers, sysinfo

Frame = tuple[str, str]  # (symbol, shared object)

#: What a sample is in: the first category any frame of its stack matches, in this order (so
#: the plugin's execute called from the handler counts as execute, the handler as the front).
CATEGORIES: list[tuple[str, Callable[[str, str], bool]]] = [
    ("execute: the PJRT plugin (the call, its threads, its allocations)",
     lambda s, d: "pjrt_c_api" in d or "ExecuteAndWait" in s
     or "engine.(*Program).Execute" in s),
    ("request: parse, validate, prepare inputs",
     lambda s, d: "front/request.Parse" in s or "Signature).Prepare" in s),
    ("response: build and marshal",
     lambda s, d: "Response).Marshal" in s or "Signature).Response" in s
     or "grpc.(*serverStream).SendMsg" in s),
    ("front: the rest of the handler (dispatch, admission, deadline, stats, metrics, spans)",
     lambda s, d: "jaxport/bridge/front" in s),
    ("gRPC write: loopy writer, flush, write(2)",
     lambda s, d: "loopyWriter" in s or "bufWriter" in s),
    ("gRPC read: frames, HPACK, stream setup, read(2)",
     lambda s, d: "http2Server).HandleStreams" in s or "readyreader" in s or "framer" in s
     or "operateHeaders" in s),
    ("gRPC: handler plumbing (recv, decode; the echo's handler)",
     lambda s, d: "google.golang.org/grpc" in s or s.startswith("main.")),
    ("Go GC (background mark, sweep, assists)",
     lambda s, d: "gcBgMarkWorker" in s or "bgsweep" in s or "gcAssist" in s or "gcDrain" in s),
    ("Go scheduler and runtime (park, wake, spin, sysmon)", lambda s, d: s.startswith("runtime.")),
]
#: The plugin has no frame pointers: its samples in libc (malloc, free) and the C++ runtime
#: have no Go frame above them, and the front's own Go code never calls malloc.
PLUGIN_LEAVES = ("libc.so", "libstdc++", "libgcc_s", "libm.so")
KERNEL_ONLY = "kernel with no user frame (interrupts, switches)"
OTHER = "other"


def samples(data: Path, pid: int) -> list[list[Frame]]:
    """The stacks (leaf first) of process `pid`'s samples."""
    text = subprocess.run(["perf", "script", "-i", str(data), "--pid", str(pid), "-F",
                           "pid,ip,sym,dso"], capture_output=True, text=True).stdout
    out: list[list[Frame]] = []
    cur: list[Frame] | None = None
    for line in text.splitlines():
        if not line.strip():
            if cur is not None:
                out.append(cur)
            cur = None
        elif cur is None:
            cur = []  # the sample's header line: its pid
        else:
            rest = line.strip().split(" ", 1)[1] if " " in line.strip() else ""
            m = re.match(r"(.*) \((.*)\)$", rest)
            cur.append((m.group(1), m.group(2)) if m else (rest, ""))
    if cur is not None:
        out.append(cur)
    return out


def category(stack: list[Frame]) -> str:
    for name, matches in CATEGORIES:
        if any(matches(s, d) for s, d in stack):
            return name
    if stack and all(d.startswith("[kernel") for _, d in stack):
        return KERNEL_ONLY
    if any(any(lib in d for lib in PLUGIN_LEAVES) for _, d in stack):
        return CATEGORIES[0][0]
    return OTHER


def split(stacks: list[list[Frame]], cpu_us_per_req: float | None) -> list[str]:
    counts = collections.Counter(category(s) for s in stacks)
    kernel = collections.Counter(category(s) for s in stacks
                                 if s and s[0][1].startswith("[kernel"))
    n = max(len(stacks), 1)
    lines = ["| share | us/request | of which in the kernel | in |", "|---:|---:|---:|---|"]
    for name, k in counts.most_common():
        us = "-" if cpu_us_per_req is None else f"{cpu_us_per_req * k / n:.1f}"
        lines.append(f"| {100 * k / n:.1f}% | {us} | {100 * kernel[name] / k:.0f}% | {name} |")
    return lines


def front_functions(stacks: list[list[Frame]], top: int) -> list[str]:
    """The front's own functions (innermost jaxport frame of each sample not in the plugin)."""
    agg: collections.Counter[str] = collections.Counter()
    for s in stacks:
        if category(s) == CATEGORIES[0][0]:
            continue
        name = next((sym for sym, _ in s if "jaxport/bridge/front" in sym), None)
        if name:
            agg[name.replace("github.com/jaxport/jaxport/bridge/front/", "")] += 1
    n = max(len(stacks), 1)
    return [f"    {100 * k / n:5.2f}%  {name}" for name, k in agg.most_common(top)]


def report(data: Path, pid: int, sort: str, top: int) -> list[str]:
    cmd = ["perf", "report", "-i", str(data), "--pid", str(pid), "--stdio", "-g", "none",
           "--sort", sort, "--no-children"]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "%" in line and not line.startswith("#")][:top]


def model_stats(target: str, model: str) -> dict[str, Any]:
    import grpc
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
    from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pbg

    with grpc.insecure_channel(target) as ch:
        s = pbg.GRPCInferenceServiceStub(ch).ModelStatistics(
            pb.ModelStatisticsRequest(name=model), timeout=10).model_stats[0]
    i = s.inference_stats
    return {"inferences": s.inference_count, "executions": s.execution_count,
            **{k: (getattr(i, k).count, getattr(i, k).ns)
               for k in ("success", "queue", "compute_input", "compute_infer", "compute_output")}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.bench.profile",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mlp8", choices=sorted(models.MODELS))
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--echo", action="store_true",
                    help="profile the grpc-go echo server (the floor) instead of the front")
    ap.add_argument("flags", nargs="*",
                    help="extra jaxport-front flags (after --; default --pjrt-plugin cpu)")
    args = ap.parse_args(argv)
    if shutil.which("perf") is None:
        print("profile: needs perf on PATH (apt install linux-perf)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="jaxport-profile-"))
    try:
        ghz_bin = ghz.ensure()
        req = models.request(args.model)
        data = work / "request.bin"
        data.write_bytes(req.raw)
        with ExitStack() as stack:
            if args.echo:
                srv = stack.enter_context(servers.echo(servers.build_wire()))
            else:
                repo = work / "repo"
                models.export_repository(repo)
                srv = stack.enter_context(servers.front(
                    servers.build_front(), repo, work, "front", [args.model],
                    args.flags or ["--pjrt-plugin", "cpu"]))
                ghz.check_answer(srv.target, req.raw, req.expected, **models.MLP_TOL)
            ghz.run(ghz_bin, srv.target, data, args.concurrency, 1.0)  # warm-up
            stats0 = None if args.echo else model_stats(srv.target, args.model)
            result: dict[str, Any] = {}
            load = threading.Thread(target=lambda: result.update(ghz.run(
                ghz_bin, srv.target, data, args.concurrency, args.seconds + 2)))
            load.start()
            time.sleep(0.5)
            perf = work / "perf.data"
            cpu0, t0 = sum(sysinfo.tree_cpu_s(srv.pid)), time.monotonic()
            subprocess.run(["perf", "record", "-a", "-F", "1999", "-g", "-o", str(perf), "--",
                            "sleep", str(args.seconds)], capture_output=True, check=True)
            cpu1, t1 = sum(sysinfo.tree_cpu_s(srv.pid)), time.monotonic()
            load.join()
            stats1 = None if args.echo else model_stats(srv.target, args.model)
        rps = float(result.get("rps") or 0)
        us_per_req = 1e6 * (cpu1 - cpu0) / (rps * (t1 - t0)) if rps else None
        stacks = samples(perf, srv.pid)
        who = "grpc-go echo" if args.echo else "jaxport-front"
        print(f"# {who}, {args.model}, c={args.concurrency}: {rps:.0f} req/s under perf, server "
              f"CPU {us_per_req or 0:.1f} us/request; {len(stacks)} samples of its process in "
              f"{args.seconds:g} s\n")
        print("\n".join(split(stacks, us_per_req)))
        if stats0 and stats1:
            d = {k: (stats1[k][0] - stats0[k][0], stats1[k][1] - stats0[k][1])
                 for k in stats1 if isinstance(stats1[k], tuple)}
            print("\n## ModelStatistics over the run (wall us per request, server side)")
            rows = stats1["inferences"] - stats0["inferences"]
            execs = max(stats1["executions"] - stats0["executions"], 1)
            print(", ".join(f"{k} {ns / cnt / 1e3:.1f}" for k, (cnt, ns) in d.items() if cnt)
                  + f"; rows per execution {rows / execs:.2f}")
        if not args.echo:
            print("\n## the front's own functions (innermost front frame, outside execute)")
            print("\n".join(front_functions(stacks, args.top)))
        print("\n## by shared object (self)")
        print("\n".join(report(perf, srv.pid, "dso", 10)))
        print("\n## hottest functions (self)")
        print("\n".join(report(perf, srv.pid, "sym", args.top)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
