"""Where the one server's CPU goes under load: `perf record -g` of `jaxport-front` (built from
this tree) serving one bench model under ghz, then the split by shared object (the front's Go
code, the PJRT plugin, the kernel, libc) and the hottest functions, self and inclusive. The
front is Go with frame pointers, so perf unwinds its stacks; the plugin is stripped (its time
shows under its .so). docs/performance.md, "Where the time goes", was measured with it.

    .venv/bin/python -m tests.bench.profile [--model mlp8] [--concurrency 16] [--seconds 5]
        [-- extra jaxport-front flags]

Needs `perf` (linux-perf); prints, never asserts.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from tests.bench import ghz, models, servers


def report(data: Path, sort: str, children: bool, top: int) -> list[str]:
    cmd = ["perf", "report", "-i", str(data), "--stdio", "-g", "none", "--sort", sort,
           "--children" if children else "--no-children"]
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if "%" in line and not line.startswith("#")][:top]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.bench.profile",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="mlp8", choices=sorted(models.MODELS))
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--top", type=int, default=40)
    ap.add_argument("flags", nargs="*", help="extra jaxport-front flags (after --)")
    args = ap.parse_args(argv)
    if shutil.which("perf") is None:
        print("profile: needs perf on PATH (apt install linux-perf)", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="jaxport-profile-"))
    try:
        front_bin, ghz_bin = servers.build_front(), ghz.ensure()
        repo = work / "repo"
        models.export_repository(repo)
        req = models.request(args.model)
        data = work / "request.bin"
        data.write_bytes(req.raw)
        with servers.front(front_bin, repo, work, "front", [args.model], args.flags) as srv:
            ghz.check_answer(srv.target, req.raw, req.expected, **models.MLP_TOL)
            load = threading.Thread(target=ghz.run, args=(ghz_bin, srv.target, data,
                                                          args.concurrency, args.seconds + 2))
            load.start()
            perf = work / "perf.data"
            subprocess.run(["perf", "record", "-F", "1999", "-g", "-p", str(srv.pid), "-o",
                            str(perf), "--", "sleep", str(args.seconds)],
                           capture_output=True, check=True)
            load.join()
        print(f"# {args.model}, c={args.concurrency}, {args.seconds:g} s of perf samples of "
              "the front\n\n## by shared object (self)")
        print("\n".join(report(perf, "dso", False, 12)))
        print("\n## hottest functions (self)")
        print("\n".join(report(perf, "sym", False, args.top)))
        print("\n## the request path (inclusive)")
        keep = ("jaxport", "grpc", "ExecuteAndWait", "runtime.gcBgMarkWorker", "runtime.sysmon",
                "runtime.schedule", "runtime.morestack", "runtime.mallocgc ")
        print("\n".join(line for line in report(perf, "sym", True, 400)
                        if any(k in line for k in keep)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
