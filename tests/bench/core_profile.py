"""The model core's Python per ModelInfer, in one process with no transport (issue 12).

    .venv/bin/python -m tests.bench.core_profile [-n 1000] [--repeat 20] [--top 25]
        [--gap-ms 0] [--model mlp8] [--tree DIR] [-- extra jaxport serve flags]

Exports the front bench's batch-8 MLP 64 -> 256 -> 16 f32 (`tests.bench.front`), builds the
worker `jaxport-front` starts (`jaxport.bridge.worker.Worker`: `build_core`, the servicer,
the same settings), loads the repository, and calls ModelInfer N times with the bench's
pre-serialized request through the worker's own frame dispatch (`Connection._dispatch` then
the call it returns: parse, servicer, serialize, size check, reply frame, RPC metric). The
reply frames go into a socketpair this loop drains between calls. Prints CPU us/request
(`time.process_time`, every thread of the process) and wall us/request of each of `--repeat`
runs of N calls and the best run (on a loaded machine the least disturbed run is the one that
repeats: many short runs, 20 x 1000 by default, spread less than a few long ones), then a
cProfile of a further run (top entries by own time and by cumulative time). `--gap-ms G`
sleeps G ms before each call, as a worker idles between requests at c=1: on this VM the same
calls then cost about twice the CPU (202 us back to back; 270-383 us after 0.5 ms asleep,
434-521 us after 2 ms: caches and the vCPU go cold), which is why a worker at c=1 spends
~0.5 ms per request on a core that costs 0.2 ms in this loop. Prints, never
asserts.
Compare the figure before and after a change on the same machine and load (it prints the load
average; anything above ~0.5 on this 2-core machine means other processes shared the cores).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import socket
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tests.bench import front


def _loop(conn: object, payload: bytes, reader: socket.socket, n: int, gap_s: float = 0.0
          ) -> None:
    from jaxport.bridge import frames

    for i in range(n):
        if gap_s:
            time.sleep(gap_s)
        run = conn._dispatch(  # type: ignore[attr-defined]
            frames.CALL, 5, i, frames.NO_DEADLINE, payload)
        run()
        try:
            while reader.recv(1 << 20):
                pass
        except BlockingIOError:
            pass


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=1000, help="ModelInfer calls per timed run")
    parser.add_argument("--warmup", type=int, default=2000)
    parser.add_argument("--top", type=int, default=25, help="cProfile rows (0 = no profile)")
    parser.add_argument("--model", default="mlp8", choices=("mlp8", "mlp8_batched"))
    parser.add_argument("--repeat", type=int, default=20, help="timed runs; best is reported")
    parser.add_argument("--gap-ms", type=float, default=0.0,
                        help="sleep this long before each call, as a worker idles between "
                             "requests at c=1 (the sleep is not counted: CPU and the call's "
                             "own wall time are)")
    parser.add_argument("--tree", type=Path,
                        help="A/B: run bridge/ and clients/python/jaxport/protocol/ from this "
                             "directory instead (e.g. `git archive <commit> bridge "
                             "clients/python/jaxport/protocol | tar -x -C DIR`)")
    parser.add_argument("serve_flags", nargs="*", help="after --: jaxport serve flags")
    args = parser.parse_args(argv)
    if args.tree is not None:  # before any module of either package is imported
        import jaxport.bridge
        import jaxport.protocol

        jaxport.bridge.__path__[:] = [str(args.tree / "bridge")]
        jaxport.protocol.__path__[:] = [str(args.tree / "clients/python/jaxport/protocol")]

    from jaxport.bridge import connection, worker
    from jaxport.bridge.core import prepare_process

    with tempfile.TemporaryDirectory(prefix="core-profile-") as tmp:
        repo = Path(tmp) / "repo"
        params = front.export_models(repo)
        payload, expected = front.request(params, args.model)
        _, settings = worker._parse_args(
            ["--socket", str(Path(tmp) / "unused.sock"), "--repository", str(repo),
             *args.serve_flags])
        prepare_process(settings)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        w = worker.Worker(settings, listener)
        w.load()
        ours, reader = socket.socketpair()
        reader.setblocking(False)
        for s in (ours, reader):
            s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        conn = connection.Connection(w, ours)
        method = w.methods[5]
        assert method.name == "ModelInfer", method.name  # the wire index the front uses

        # The answer once, checked (as the bench checks every server's answer).
        response = method.handler(method.parse(payload), connection.CallContext(-1))
        got = np.frombuffer(response.raw_output_contents[0], np.float32).reshape(expected.shape)
        np.testing.assert_allclose(got, expected, **front.TOL)

        _loop(conn, payload, reader, args.warmup)
        where = f"tree {args.tree}" if args.tree else "this tree"
        print(f"{where}: load average {' / '.join(f'{v:.1f}' for v in os.getloadavg())}; "
              f"model {args.model}; {args.n} ModelInfer calls per run, best of {args.repeat}"
              + (f"; {args.gap_ms:g} ms asleep before each call" if args.gap_ms else ""))
        best_cpu = best_wall = float("inf")
        gap = args.gap_ms / 1e3
        for r in range(args.repeat):
            c0, w0 = time.process_time(), time.perf_counter()
            _loop(conn, payload, reader, args.n, gap)
            cpu = (time.process_time() - c0) / args.n * 1e6
            wall = (time.perf_counter() - w0) / args.n * 1e6 - args.gap_ms * 1e3
            print(f"  run {r + 1}: {cpu:.1f} us CPU/request, {wall:.1f} us wall/request")
            best_cpu, best_wall = min(best_cpu, cpu), min(best_wall, wall)
        print(f"best: {best_cpu:.1f} us CPU/request ({best_wall:.1f} us wall)")

        if args.top:
            prof = cProfile.Profile()
            prof.enable()
            _loop(conn, payload, reader, 10000)
            prof.disable()
            for key in ("tottime", "cumulative"):
                out = io.StringIO()
                pstats.Stats(prof, stream=out).sort_stats(key).print_stats(args.top)
                text = out.getvalue()
                start = text.find("   ncalls")
                print(f"\n-- cProfile by {key} --")
                print(text[start:] if start >= 0 else text)
        ours.close()
        reader.close()
        listener.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
