"""`make bench`: the one server measured beside its floors and its peers in ONE run, and every
target of issues 36 and 33 printed met or missed.

Servers, each started once; every cell measured in each of `--rounds` rounds (each cell keeps
its best round: other processes only ever slow a round down; every round is in the JSON), the
rows of one case and concurrency back to back so the two cells of a ratio see the same minutes:
- `echo`: the grpc-go echo server (tests/bench/wire: ModelInfer answered with its input, no
  model): the floor of any Go server here;
- `native`: `jaxport-front` built from this tree, the native engine (PJRT C API, no Python);
  `native batching`: the same server's batcher on the models exported with batch sizes;
- `workers`: the same front with every model on its Python worker (`--engine exported`,
  `--workers 1`), and `workers batching`;
- `triton`: Triton Inference Server 2.51 (python backend, `jax.jit`, one instance, no
  batching; tests/bench/triton.py), on the batch-8 MLP.
Cases (ghz v0.93.0, closed loop, one connection, every server's answer checked against JAX
first; tests/bench/models.py):
- `mlp8`: the MLP 64-256-16, 8-row requests, c=1/16/64, every server;
- `mlp1`: the same MLP, 1-row requests, unbatched and batching, c=1/64;
- `big1`: the compute-bound MLP 1024-4096-1024 (33 MB of weights), 1-row requests, unbatched
  and batching, c=1/64.
Then: the 1 GiB artifact's load (the front's load line: GiB/s with every checksum verified;
peak RSS against its weights; the floors that bound it, read and sha256 in this run), issue
33's footprint (the demo model under `jaxport serve` with default flags: RSS of the process
tree, start to ready, Python processes in the tree), 16 MiB each way through the Go client
(native vs echo), the exporter's figures (tests/bench/exporter.py) and the Ray scale-out ratio
(tests/bench/scale_out.py).

Writes bench-results/<UTC stamp>.{json,md,png}; a full run (neither --quick nor --only) also
latest.{json,md,png}. Prints the report, targets last. No assertion on any timing.

    .venv/bin/python -m tests.bench.run [--duration S] [--rounds N] [--quick] [--only S,...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import numpy as np

from tests.bench import exporter, ghz, models, report, servers, sysinfo, targets, triton

ROOT = servers.ROOT
SECTIONS = ("serving", "load", "footprint", "large", "exporter", "scale-out")
#: --batching-models delay of the batched models (us): how long a batch may wait for company
#: once a request has had to queue behind an execution (a lone request never waits).
BATCH_DELAY_US = 2000
LARGE_CALLS = 12


def log(msg: str) -> None:
    """Progress to stderr (the report goes to stdout)."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------
# serving


def cells() -> list[tuple[str, str, str]]:
    """Every (case, row, model) measured: the model is what the row's requests name."""
    out = [("mlp8", row, "mlp8") for row in ("echo", "native", "workers", "triton")]
    for case, base in (("mlp1", "mlp1"), ("big1", "big1")):
        out += [(case, "echo", base), (case, "native", base),
                (case, "native batching", f"{base}_batched"), (case, "workers", base),
                (case, "workers batching", f"{base}_batched")]
    return out


def levels(case: str, args: argparse.Namespace) -> list[int]:
    return args.levels_mlp8 if case == "mlp8" else args.levels_1row


def serving(work: Path, front_bin: Path, wire: Path, ghz_bin: Path, args: argparse.Namespace,
            errors: dict[str, str]) -> dict[str, Any]:
    """Every serving cell, best of the rounds; `errors` gets a server that could not run."""
    repo = work / "repo"
    log("exporting the bench models")
    models.export_repository(repo)
    reqs = {name: models.request(name) for name in models.MODELS}
    data = {}
    for name, r in reqs.items():
        data[name] = work / f"{name}.bin"
        data[name].write_bytes(r.raw)
    batching = ["--batching-models", ",".join(f"{m}:{BATCH_DELAY_US}" for m in models.BATCHED)]
    plugin = ["--pjrt-plugin", args.native_plugin]
    names = list(models.MODELS)
    srv: dict[str, servers.Server] = {}
    with ExitStack() as stack:
        log("starting echo, native, workers, triton")
        srv["echo"] = stack.enter_context(servers.echo(wire))
        srv["native"] = stack.enter_context(
            servers.front(front_bin, repo, work, "native", names, [*plugin, *batching]))
        srv["workers"] = stack.enter_context(
            servers.front(front_bin, repo, work, "workers", names,
                          [*plugin, *servers.worker_flags(), *batching]))
        if not args.no_triton:
            try:
                srv["triton"] = stack.enter_context(triton.serve(work, "mlp8"))
            except (servers.BenchSetupError, RuntimeError, OSError,
                    subprocess.CalledProcessError) as exc:
                errors["triton"] = str(exc).splitlines()[0]
                log(f"triton: {errors['triton']}")
        todo = [c for c in cells() if c[1].split()[0] in srv]
        for _, row, model in todo:
            server = srv[row.split()[0]]
            if row != "echo":
                ghz.check_answer(server.target, reqs[model].raw, reqs[model].expected,
                                 **models.MLP_TOL)
        log("every answer equals JAX's; loaded RSS: " + ", ".join(
            f"{k} {sysinfo.tree_rss_bytes(s.pid) / 2**20:.0f} MiB" for k, s in srv.items()))
        rounds: dict[str, dict[str, dict[int, list[dict]]]] = {}
        # The rows a target compares are measured back to back (case, then concurrency, then
        # every row, their order reversed every other round), so a ratio's two cells see the
        # same minutes of a shared machine.
        groups: dict[tuple[str, int], list[tuple[str, str]]] = {}
        for case, row, model in todo:
            for c in levels(case, args):
                groups.setdefault((case, c), []).append((row, model))
        for rnd in range(args.rounds):
            for (case, c), rows in groups.items():
                for row, model in rows if rnd % 2 == 0 else rows[::-1]:
                    cell = ghz.measure(ghz_bin, srv[row.split()[0]], data[model], c,
                                       args.duration, args.warmup)
                    cell["model"] = model
                    rounds.setdefault(case, {}).setdefault(row, {}).setdefault(c, []).append(cell)
                    log(f"round {rnd + 1}/{args.rounds} {case} {row} c={c}: {cell['rps']:.0f} "
                        f"req/s p50 {cell['p50_ms'] or 0:.2f} ms cpu/req "
                        f"{cell['cpu_ms_per_req'] or 0:.3f} ms errors {cell['errors']} "
                        f"{cell['first_error']} (load {cell['loadavg_1m']:.1f})")
        stats = {m: _model_stats(srv["native"].target, m) for m in models.BATCHED}
    best = {case: {row: {c: max(cs, key=lambda x: x["rps"]) | {"rounds_rps": [x["rps"] for x in cs]}
                         for c, cs in by_c.items()} for row, by_c in rows.items()}
            for case, rows in rounds.items()}
    return {"cells": best, "native_batch_stats": stats, "batch_delay_us": BATCH_DELAY_US,
            "ghz": ghz.GHZ_VERSION, "rounds": args.rounds, "duration_s": args.duration}


def _model_stats(target: str, model: str) -> dict[str, Any]:
    """inference_count / execution_count and the batch sizes of `model` (ModelStatistics)."""
    import grpc
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
    from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pbg

    with grpc.insecure_channel(target) as ch:
        st = pbg.GRPCInferenceServiceStub(ch).ModelStatistics(
            pb.ModelStatisticsRequest(name=model), timeout=10)
    s = st.model_stats[0]
    return {"inferences": s.inference_count, "executions": s.execution_count,
            "rows_per_execution": s.inference_count / s.execution_count
            if s.execution_count else None,
            "batch_sizes": {b.batch_size: b.compute_infer.count for b in s.batch_stats}}


# ------------------------------------------------------------------------------------------
# load, footprint, 16 MiB


def load_gib(work: Path, front_bin: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The 1 GiB artifact opened by the front (every checksum verified): its load line, the
    front's peak RSS against the weights, start to ready; and this run's floors: the chunk
    files read (page cache: they were just written) and sha256 on one core."""
    repo = work / "gib-repo"
    log("exporting the 1 GiB model")
    weights = models.export_gib(repo / "gib" / "1")
    chunks = [p for p in (repo / "gib" / "1" / "weights").rglob("*") if p.is_file()
              and p.name != "zarr.json"]
    t0 = time.perf_counter()
    n = 0
    buf = bytearray(16 << 20)
    for p in chunks:
        with open(p, "rb", buffering=0) as f:
            while k := f.readinto(buf):
                n += k
    read_gibs = n / 2**30 / (time.perf_counter() - t0)
    h = hashlib.sha256()
    block = os.urandom(16 << 20)
    t0 = time.perf_counter()
    for _ in range(16):
        h.update(block)
    sha_gibs = 16 * len(block) / 2**30 / (time.perf_counter() - t0)
    with servers.front(front_bin, repo, work, "gib", ["gib"],
                       ["--pjrt-plugin", args.native_plugin]) as srv:
        rss, peak = sysinfo.process_rss_bytes(srv.pid)
        tree = sysinfo.tree_rss_bytes(srv.pid)
        line = next((r for r in servers.log_records(srv) if r.get("msg") == "model served"
                     and r.get("model") == "gib"), {})
    return {"weight_bytes": weights, "load_line": line,
            "gib_per_s": line.get("weights_gib_per_s"), "load_seconds": line.get("load_seconds"),
            "start_to_ready_s": srv.ready - srv.started, "rss_bytes": rss, "peak_rss_bytes": peak,
            "tree_rss_bytes": tree, "peak_rss_over_weights": peak / weights,
            "read_gib_per_s": read_gibs, "sha256_gib_per_s_one_core": sha_gibs,
            "cores": len(os.sched_getaffinity(0))}


def footprint(work: Path, front_bin: Path) -> dict[str, Any]:
    """Issue 33: the demo model under `jaxport serve` with its default flags (but free ports
    and a port file): total RSS of the process tree once ready, start to ready, and the Python
    processes left in the tree."""
    repo = work / "demo-repo"
    models.export_demo(repo / "example" / "1")
    port_file = work / "demo.port.json"
    log_path = work / "demo.log"
    cmd = [str(Path(sys.executable).parent / "jaxport"), "serve", "--front-binary",
           str(front_bin), "--repository", str(repo), "--port", "0", "--metrics-port", "0",
           "--port-file", str(port_file)]
    t0 = time.monotonic()
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        while not port_file.exists() or not port_file.read_text().strip().endswith("}"):
            if proc.poll() is not None:
                raise RuntimeError(f"jaxport serve exited {proc.returncode}: "
                                   + log_path.read_text(errors="replace")[-2000:])
            time.sleep(0.002)
        target = f"127.0.0.1:{json.loads(port_file.read_text())['grpc_port']}"
        servers.wait_ready(target, ["example"], proc, t0 + 120, log_path)
        ready = time.monotonic() - t0
        tree = sysinfo.process_tree(proc.pid)
        commands = {p: sysinfo.command(p) for p in tree}
        rss = sysinfo.tree_rss_bytes(proc.pid)
    finally:
        servers.stop(proc)
    python = [c for c in commands.values() if "python" in c.split(" ")[0]]
    return {"start_to_ready_s": ready, "tree_rss_bytes": rss, "processes": list(commands.values()),
            "python_processes": python}


def large(work: Path, front_bin: Path, wire: Path, args: argparse.Namespace) -> list[dict]:
    """16 MiB each way, c=1, through the jaxport Go client: the native engine against the
    grpc-go echo (the wire floor) and memcpy of this run."""
    repo = work / "ew-repo"
    models.export_ew16(repo / "ew16" / "1")
    memcpy = sysinfo.memcpy_bandwidth(16 << 20)
    out = []
    with servers.echo(wire) as echo, servers.front(front_bin, repo, work, "ew16", ["ew16"],
                                                   ["--pjrt-plugin", args.native_plugin]) as nat:
        for name, srv, expect in (("native", nat, "affine"), ("echo", echo, "echo")):
            lat = servers.wire_call(wire, srv.target, expect, "ew16", LARGE_CALLS)
            med = float(np.median(lat))
            out.append({"server": name, "median_ms": med * 1e3, "mb_s": (16 << 20) / med / 1e6,
                        "pct_memcpy": 100 * (16 << 20) / med / memcpy})
    return out


def scale_out(work: Path, front_bin: Path, args: argparse.Namespace) -> dict[str, Any]:
    """tests/bench/scale_out.py (2 Ray Serve replicas reached directly vs one jaxport serve)."""
    out = work / "scale-out.json"
    proc = subprocess.run([sys.executable, str(ROOT / "tests" / "bench" / "scale_out.py"),
                           "--duration", str(max(args.duration, 3.0)), "--front-binary",
                           str(front_bin), "--json", str(out)], cwd=ROOT,
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0 or not out.exists():
        raise RuntimeError((proc.stderr.strip().splitlines() or ["no output"])[-1])
    return json.loads(out.read_text())


# ------------------------------------------------------------------------------------------
# main


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="make bench", description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=5.0, help="measured seconds per cell")
    ap.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds per cell")
    ap.add_argument("--rounds", type=int, default=3, help="rounds; each cell keeps its best")
    ap.add_argument("--only", default="", help="comma list of sections (default all): "
                    + ",".join(SECTIONS))
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 1 s cells, one round, no exporter or scale-out")
    ap.add_argument("--no-triton", action="store_true", help="leave the Triton peer out")
    ap.add_argument("--native-plugin", default="cpu",
                    help="the native rows' --pjrt-plugin (cpu, cuda, a .so path)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results")
    args = ap.parse_args(argv)
    args.levels_mlp8, args.levels_1row = [1, 16, 64], [1, 64]
    only = [s for s in args.only.split(",") if s]
    if bad := [s for s in only if s not in SECTIONS]:
        ap.error(f"--only: unknown section(s) {', '.join(bad)} (choose from {', '.join(SECTIONS)})")
    want = set(only or SECTIONS)
    if args.quick:
        args.duration, args.warmup, args.rounds = 1.0, 0.3, 1
        if not only:
            want -= {"exporter", "scale-out"}
    ts = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    work = Path(tempfile.mkdtemp(prefix="jaxport-bench-"))
    results: dict[str, Any] = {
        "timestamp": ts, "machine": sysinfo.machine(), "commit": _commit(),
        "settings": {"duration_s": args.duration, "warmup_s": args.warmup, "rounds": args.rounds,
                     "quick": args.quick, "sections": sorted(want),
                     "native_plugin": args.native_plugin},
        "loadavg_start": os.getloadavg(), "errors": {},
    }
    errors: dict[str, str] = results["errors"]
    t_start = time.monotonic()
    try:
        log(f"work dir {work}; load average {os.getloadavg()[0]:.1f}")
        front_bin, wire, ghz_bin = servers.build_front(), servers.build_wire(), ghz.ensure()

        def section(name: str, fn: Callable[[], Any]) -> None:
            if name not in want:
                return
            log(f"section {name}")
            try:
                results[name] = fn()
            except (servers.BenchSetupError, RuntimeError, AssertionError, OSError) as exc:
                errors[name] = str(exc).strip().splitlines()[0] if str(exc).strip() else repr(exc)
                log(f"{name}: {errors[name]}")

        section("serving", lambda: serving(work, front_bin, wire, ghz_bin, args, errors))
        section("load", lambda: load_gib(work, front_bin, args))
        section("footprint", lambda: footprint(work, front_bin))
        section("large", lambda: large(work, front_bin, wire, args))
        section("exporter", lambda: exporter.measure(work / "exporter", 1 << 30))
        section("scale-out", lambda: scale_out(work, front_bin, args))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["wall_s"] = time.monotonic() - t_start
    results["loadavg_end"] = os.getloadavg()
    results["targets"] = targets.evaluate(results)
    args.out.mkdir(parents=True, exist_ok=True)
    base = args.out / ts
    base.with_suffix(".json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    md = report.markdown(results)
    base.with_suffix(".md").write_text(md)
    if report.plot(results, base.with_suffix(".png")):
        log(f"plot {base.with_suffix('.png')}")
    if not args.quick and not only:
        for suffix in (".json", ".md", ".png"):
            if base.with_suffix(suffix).exists():
                shutil.copyfile(base.with_suffix(suffix), args.out / f"latest{suffix}")
    print(md)
    log(f"done in {results['wall_s']:.0f} s; results in {base}.{{json,md,png}}")
    return 0


def _commit() -> str:
    proc = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "--",
                            "bridge/front", "tests/bench"], capture_output=True, text=True)
    return proc.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")


if __name__ == "__main__":
    sys.exit(main())
