"""Where a loaded bridge spends its time: py-spy samples every thread of the Python execution
workers of a real `jaxport serve` (the native front's children; the front itself is Go, which
py-spy does not read) while the bench's closed-loop client drives it, then prints the hottest
functions of all workers together.

Usage: `.venv/bin/python -m tests.bench.profile [--model mlp|mlp_batched|ew16]
[--concurrency 16] [--seconds 8] [--gil] [-- extra jaxport serve flags]`
(needs `pip install py-spy`).
Self time = samples whose innermost frame is the function; total = samples where it is on the
stack. Idle threads (waiting on a lock, condition or epoll) are excluded (py-spy default).
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

from tests.bench import load as load_mod
from tests.bench import models
from tests.bench.run import MIB, MLP_TOL, bridge_cmd, mlp_requests, server


def _export(repo: Path, model: str) -> None:
    import jax
    from jaxport.exporter import export

    if model.startswith("ew"):
        mib = int(model[2:])
        export(models.elementwise, models.elementwise_params(),
               {"x": jax.ShapeDtypeStruct((mib * MIB // 4,), np.float32)}, repo / model / "1",
               output_names=["y"], quiet=True, goldens=0)
        return
    x = jax.ShapeDtypeStruct((1, models.MLP_IN), np.float32)
    sizes = {"batch_sizes": (1, 8, 32)} if model == "mlp_batched" else {}
    export(models.mlp, models.mlp_params(), {"x": x}, repo / model / "1", output_names=["y"],
           quiet=True, goldens=0, **sizes)


def _requests(model: str) -> tuple[list[bytes], list[dict]]:
    if not model.startswith("ew"):
        return mlp_requests(models.mlp_params(), model)
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

    x = np.random.default_rng(0).standard_normal(int(model[2:]) * MIB // 4).astype(np.float32)
    req = pb.ModelInferRequest(model_name=model)
    req.inputs.add(name="x", datatype="FP32", shape=[x.size])
    req.raw_input_contents.append(x.tobytes())
    return [req.SerializeToString()], [{"y": x * np.float32(2) + np.float32(0.5)}]


def summarize(raw: str, top: int = 25) -> str:
    """Self and total sample counts per function from py-spy's collapsed-stack output."""
    self_n: collections.Counter[str] = collections.Counter()
    total_n: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        samples += n
        # Each stack starts with its process and the processes above it ("process PID:...",
        # front then worker): dropped, so every worker's samples count together.
        names = stack.split(";")
        while names and names[0].startswith("process "):
            names.pop(0)
        frames = [f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0].split("/")[-1] + ")"
                  if " (" in f else f for f in names]
        if frames:
            self_n[frames[-1]] += n
        for f in set(frames):
            total_n[f] += n
    lines = [f"{samples} busy samples", "", "self%   function"]
    lines += [f"{100 * n / samples:5.1f}   {f}" for f, n in self_n.most_common(top)]
    lines += ["", "total%  function"]
    lines += [f"{100 * n / samples:5.1f}   {f}" for f, n in total_n.most_common(top)]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Export, serve, load, sample, print."""
    ap = argparse.ArgumentParser(prog="python -m tests.bench.profile")
    ap.add_argument("--model", default="mlp")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--gil", action="store_true",
                    help="sample only the thread holding the GIL: what saturates the one core "
                         "Python code can use")
    ap.add_argument("serve_flags", nargs="*")
    args = ap.parse_args(argv)
    pyspy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    work = Path(tempfile.mkdtemp(prefix="jaxport-profile-"))
    try:
        _export(work / "repo", args.model)
        reqs, expected = _requests(args.model)
        tol = MLP_TOL if not args.model.startswith("ew") else {"rtol": 1e-6, "atol": 1e-6}
        ctx = multiprocessing.get_context("spawn")
        cmd = bridge_cmd(work / "repo", *args.serve_flags)
        with ProcessPoolExecutor(1, mp_context=ctx) as pool, \
                server(cmd, work, "profiled", [args.model]) as srv:
            spec = load_mod.LoadSpec(srv.target, reqs, expected, args.concurrency,
                                     args.seconds + 2, 0.5, **tol)
            load = pool.submit(load_mod.run_grpc_load, spec)
            out = work / "profile.txt"
            subprocess.run([pyspy, "record", "--pid", str(srv.pid), "--duration",
                            str(int(args.seconds)), "--rate", "200", "--format", "raw",
                            "--output", str(out), "--nonblocking", "--subprocesses",
                            *(["--gil"] if args.gil else [])], check=True,
                           capture_output=True)
            summary = load.result().summary()
        print(f"model {args.model}, concurrency {args.concurrency}: {summary['rps']:.0f} req/s, "
              f"p50 {summary['p50_ms']:.2f} ms, errors {summary['errors']}, "
              f"mismatches {summary['mismatches']}")
        print(summarize(out.read_text()))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
