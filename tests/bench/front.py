"""Issue 12's benchmark: the native front (Go + Python workers) against `--frontend python`
(grpcio's Python server, `jaxport serve`), driven by ghz, in one run.

Model: the issue's batch-8 MLP 64 -> 256 -> 16 f32 (`mlp8`; `mlp8_batched` exported with
batch sizes 8,64,256,512 for dynamic batching, fed the same 8-row requests). Cases:

- closed loop at c=1 and c=16 (ghz, one connection, pre-serialized binary request): req/s,
  p50, p99 of each server; server CPU per request from /proc/<pid>/stat (utime + stime of the
  server process and, for the front, of each worker child), split front vs workers;
- 16 MiB each way over the wire (the elementwise model, c=1; ghz cannot raise its 4 MiB
  receive limit): MB/s vs an in-run numpy memcpy, with the bench's Python client and with the
  jaxport Go client (`tests/bench/wire`, every answer checked), plus the floor under both: a
  grpc-go server answering with its input and no model (`wire echo`, with grpc-go's defaults
  as the front has them and with 64 MiB flow-control windows), called by the same Go client;
- dynamic batching at c=64 vs the unbatched model, both on the native front;
- diagnostic: the front's transport floor, its workers answering ModelInfer from a cache
  (`tests/bench/floor_worker.py`): what front + framing cost without the model core's Python.

Every server's answer to the load's request is checked against JAX before the load (ghz does
not look at answers). No assertions on timings: ratios go into the bench results.
ghz is pinned (`GHZ_VERSION`) and installed into build/bench/bin with `go install` if missing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from jaxport.bridge import cli

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / "build" / "bench" / "bin"
GHZ_VERSION = "v0.93.0"
GHZ_PACKAGE = "github.com/bojand/ghz/cmd/ghz"
FRONT_SRC = ROOT / "bridge" / "front"
WIRE_SRC = ROOT / "tests" / "bench" / "wire"
LARGE_CALLS = 12  # 16 MiB round trips per server and client
IN, HIDDEN, OUT, ROWS = 64, 256, 16, 8
BATCH_SIZES = (8, 64, 256, 512)
MODEL_INFER = "inference.GRPCInferenceService.ModelInfer"
TOL = {"rtol": 1e-4, "atol": 1e-4}
DEFAULT_WORKERS = 2  # the --workers default proposed for the front (docs/performance.md)
WORKER_COUNTS = (1, 2)  # measured side by side (the default's evidence)


class BenchSetupError(RuntimeError):
    """A tool the bench needs cannot be had (one line, naming it)."""


def _go() -> str:
    go = shutil.which("go") or ("/usr/local/go/bin/go"
                                if os.access("/usr/local/go/bin/go", os.X_OK) else None)
    if go is None:
        raise BenchSetupError(f"the front benchmark needs Go >= 1.26 (`go` on PATH) to build "
                              f"bridge/front and install ghz {GHZ_VERSION}")
    return go


def ensure_ghz() -> Path:
    """build/bench/bin/ghz at GHZ_VERSION, `go install`ed there if missing."""
    ghz = BIN / "ghz"
    stamp = BIN / "ghz.version"
    if ghz.exists() and stamp.exists() and stamp.read_text().strip() == GHZ_VERSION:
        return ghz
    BIN.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([_go(), "install", f"{GHZ_PACKAGE}@{GHZ_VERSION}"],
                          env={**os.environ, "GOBIN": str(BIN), "GOFLAGS": "-mod=mod"},
                          capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise BenchSetupError(f"go install {GHZ_PACKAGE}@{GHZ_VERSION} failed: {last}")
    stamp.write_text(GHZ_VERSION + "\n")
    return ghz


def _go_build(src: Path, name: str) -> Path:
    """build/bench/bin/<name> built from `src` in this tree (the bench measures the current
    source)."""
    out = BIN / name
    BIN.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([_go(), "build", "-o", str(out), "."], cwd=src,
                          capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        raise BenchSetupError(f"go build of {src.relative_to(ROOT)} failed: "
                              f"{proc.stderr.strip()}")
    return out


def build_front() -> Path:
    """The front (bridge/front)."""
    return _go_build(FRONT_SRC, "jaxport-front")


def build_wire() -> Path:
    """tests/bench/wire: the Go 16 MiB client and the grpc-go echo floor."""
    return _go_build(WIRE_SRC, "wire")


def wire_call(wire: Path, target: str, expect: str, *extra: str) -> list[float]:
    """LARGE_CALLS 16 MiB round trips with the Go client, each answer checked; seconds each."""
    proc = subprocess.run([str(wire), "call", "--target", target, "--expect", expect,
                           "--n", str(LARGE_CALLS), *extra],
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise AssertionError(f"16 MiB Go client against {target}: {proc.stderr.strip()}")
    return [ms / 1e3 for ms in json.loads(proc.stdout)["latencies_ms"]]


def wire_floor(wire: Path, tuned: bool) -> list[float]:
    """The Go client against `wire echo` (no model): what grpc-go moves here."""
    flags = ["--tuned"] if tuned else []
    proc = subprocess.Popen([str(wire), "echo", *flags], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        target = proc.stdout.readline().strip()
        if not target:
            raise AssertionError(f"wire echo exited with {proc.wait()} before listening")
        return wire_call(wire, target, "echo", *flags)
    finally:
        proc.terminate()  # by PID, this process's own child
        proc.wait(timeout=30)


# ------------------------------------------------------------------------------------------
# model and requests


def mlp8(params: dict[str, Any], x: Any) -> Any:
    """The issue's MLP: 64 -> 256 (ReLU) -> 16, f32."""
    import jax

    return jax.nn.relu(x @ params["w1"] + params["b1"]) @ params["w2"] + params["b2"]


def mlp8_params(seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "w1": (rng.standard_normal((IN, HIDDEN)) * np.sqrt(2 / IN)).astype(np.float32),
        "b1": (rng.standard_normal(HIDDEN) * 0.1).astype(np.float32),
        "w2": (rng.standard_normal((HIDDEN, OUT)) * np.sqrt(2 / HIDDEN)).astype(np.float32),
        "b2": (rng.standard_normal(OUT) * 0.1).astype(np.float32),
    }


def export_models(repo: Path) -> dict[str, np.ndarray]:
    """`mlp8` (batch 8), `mlp8_batched` (batch sizes BATCH_SIZES) and the 16 MiB elementwise
    model `ew16` into `repo`."""
    import jax
    from jaxport.exporter import export

    from tests.bench import models

    params = mlp8_params()
    spec = {"x": jax.ShapeDtypeStruct((ROWS, IN), np.float32)}
    export(mlp8, params, spec, repo / "mlp8" / "1", output_names=["y"], name="mlp8",
           quiet=True, goldens=1)
    export(mlp8, params, spec, repo / "mlp8_batched" / "1", output_names=["y"],
           name="mlp8_batched", quiet=True, goldens=1, batch_sizes=BATCH_SIZES)
    ew = {"x": jax.ShapeDtypeStruct((16 * (1 << 20) // 4,), np.float32)}
    export(models.elementwise, models.elementwise_params(), ew, repo / "ew16" / "1",
           output_names=["y"], name="ew16", quiet=True, goldens=1)
    return params


def request(params: dict[str, np.ndarray], model: str) -> tuple[bytes, np.ndarray]:
    """One serialized 8-row ModelInferRequest (raw contents) and JAX's answer."""
    import jax
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

    x = np.random.default_rng(3).standard_normal((ROWS, IN)).astype(np.float32)
    req = pb.ModelInferRequest(model_name=model, id="bench")
    req.inputs.add(name="x", datatype="FP32", shape=[ROWS, IN])
    req.raw_input_contents.append(x.tobytes())
    return req.SerializeToString(), np.asarray(jax.jit(mlp8)(params, x))


def check_answer(target: str, raw: bytes, expected: np.ndarray) -> None:
    """The server's answer to `raw` equals JAX's (ghz never looks at answers)."""
    import grpc

    from tests.bench.load import MODEL_INFER as METHOD
    from tests.bench.load import check_response

    with grpc.insecure_channel(target) as ch:
        got = ch.unary_unary(METHOD)(raw, timeout=60)
    bad = check_response(got, {"y": expected}, **TOL)
    if bad:
        raise AssertionError(f"{target}: answer differs from JAX: {bad}")


# ------------------------------------------------------------------------------------------
# measuring


def process_tree_cpu(pid: int) -> tuple[float, float]:
    """(CPU s of `pid` itself, CPU s of its live children and their descendants)."""
    from tests.bench.sysinfo import process_cpu_s

    own = process_cpu_s(pid)
    kids = 0.0
    for child in _children(pid):
        try:
            a, b = process_tree_cpu(child)
        except (FileNotFoundError, ProcessLookupError):
            continue
        kids += a + b
    return own, kids


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def run_ghz(ghz: Path, target: str, data: Path, concurrency: int, duration_s: float) -> dict:
    """One closed-loop ghz run; its JSON report."""
    cmd = [str(ghz), "--insecure", "--proto", str(ROOT / "proto/inference/grpc_service.proto"),
           "--import-paths", str(ROOT / "proto"), "--call", MODEL_INFER, "--binary",
           "--binary-file", str(data), "-c", str(concurrency), "--connections", "1",
           "-z", f"{duration_s}s", "--format", "json", "--timeout", "60s",
           "--duration-stop", "ignore", target]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=duration_s + 120)
    if proc.returncode != 0 and not proc.stdout.strip():
        raise RuntimeError(f"ghz failed: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout)


def measure(ghz: Path, srv_pid: int, target: str, data: Path, concurrency: int,
            duration_s: float, warmup_s: float) -> dict[str, Any]:
    """Warm-up, then one measured ghz run: req/s, p50/p99 ms, errors, server CPU per request
    (the server process and its children, i.e. front and workers)."""
    run_ghz(ghz, target, data, concurrency, warmup_s)
    own0, kids0 = process_tree_cpu(srv_pid)
    rep = run_ghz(ghz, target, data, concurrency, duration_s)
    own1, kids1 = process_tree_cpu(srv_pid)
    lat = {int(d["percentage"]): d["latency"] / 1e6 for d in rep.get("latencyDistribution")
           or []}
    codes = rep.get("statusCodeDistribution") or {}
    ok = int(codes.get("OK", 0))
    errors = sum(int(v) for k, v in codes.items() if k != "OK")
    return {
        "concurrency": concurrency,
        "requests": ok,
        "rps": float(rep.get("rps", 0.0)) * ok / max(int(rep.get("count", 0)), 1),
        "p50_ms": lat.get(50),
        "p99_ms": lat.get(99),
        "errors": errors,
        "first_error": next(iter(rep.get("errorDistribution") or {}), ""),
        "server_cpu_ms_per_req": 1e3 * ((own1 - own0) + (kids1 - kids0)) / ok if ok else None,
        "front_cpu_ms_per_req": 1e3 * (own1 - own0) / ok if ok else None,
        "workers_cpu_ms_per_req": 1e3 * (kids1 - kids0) / ok if ok else None,
    }


ServerCtx = Callable[..., Any]  # tests.bench.run.server


def front_vs_python(server: ServerCtx, pool: Any, work: Path, repo: Path, rounds: int,
                    duration_s: float, warmup_s: float, workers: Sequence[int],
                    memcpy_16: float, log: Callable[[str], None]) -> dict[str, Any]:
    """Every case of this module; returns the `front` section of the bench results."""
    from tests.bench import load as load_mod

    ghz = ensure_ghz()
    front_bin = build_front()
    wire = build_wire()
    params = export_models(repo)
    raw, expected = request(params, "mlp8")
    braw, bexpected = request(params, "mlp8_batched")
    data, bdata = work / "mlp8.bin", work / "mlp8_batched.bin"
    data.write_bytes(raw)
    bdata.write_bytes(braw)

    py = [str(Path(sys.executable).parent / "jaxport"), "serve"]
    if "--frontend" in subprocess.run([*py, "--help"], capture_output=True,
                                      text=True).stdout:
        py += ["--frontend", "python"]
    common = ["--repository", str(repo), "--host", "127.0.0.1", "--port", "0",
              "--metrics-port", "-1", "--log-level", "WARNING"]
    worker_cmd = " ".join(cli.WORKER_CMD)

    def native(n: int, *extra: str, cmd: str = worker_cmd) -> list[str]:
        # The front with jaxport serve's hand-off and worker command `cmd` (front_launch).
        return [sys.executable, "-m", "tests.bench.front_launch", str(front_bin), cmd,
                "--workers", str(n), *common, *extra]

    configs: dict[str, tuple[list[str], list[str], Path, bytes, np.ndarray, list[int]]] = {
        "python": ([*py, *common], ["mlp8", "ew16"], data, raw, expected, [1, 16, 64]),
    }
    for n in workers:
        configs[f"front {n}w"] = (native(n), ["mlp8", "ew16"], data, raw, expected,
                                  [1, 16, 64])
        configs[f"front {n}w batching"] = (
            native(n, "--batching-models", "mlp8_batched:2000"), ["mlp8_batched"], bdata,
            braw, bexpected, [64])
    # Diagnostic: the same front and workers with ModelInfer answered from a cache
    # (tests/bench/floor_worker.py): the transport without the model core's Python.
    configs[f"front {DEFAULT_WORKERS}w transport floor"] = (
        native(DEFAULT_WORKERS, cmd=f"{sys.executable} -m tests.bench.floor_worker"), ["mlp8"],
        data, raw, expected, [1, 16])
    cells: dict[str, dict[int, list[dict[str, Any]]]] = {}
    large: dict[tuple[str, str], list[float]] = {}
    x16 = np.random.default_rng(7).standard_normal(16 * (1 << 20) // 4).astype(np.float32)
    req16 = _ew_request(x16)
    exp16 = {"y": x16 * np.float32(2.0) + np.float32(0.5)}
    for rnd in range(rounds):
        for name, (cmd, models, path, req, exp, levels) in configs.items():
            log(f"front bench round {rnd + 1}/{rounds}: {name}")
            with server(cmd, work, name.replace(" ", "-"), models) as srv:
                check_answer(srv.target, req, exp)
                for c in levels:
                    row = measure(ghz, srv.pid, srv.target, path, c, duration_s, warmup_s)
                    cells.setdefault(name, {}).setdefault(c, []).append(row)
                    log(f"  c={c}: {row['rps']:.0f} req/s p50 {row['p50_ms'] or 0:.2f} ms "
                        f"p99 {row['p99_ms'] or 0:.2f} ms cpu/req "
                        f"{row['server_cpu_ms_per_req'] or 0:.3f} ms (front "
                        f"{row['front_cpu_ms_per_req'] or 0:.3f}) errors {row['errors']} "
                        f"{row['first_error']}")
                if "ew16" in models:
                    res = pool.submit(load_mod.run_repeats, srv.target, req16, exp16, 5,
                                      1e-6, 1e-6).result()
                    if res["errors"] or res["mismatches"]:
                        raise AssertionError(f"{name} 16 MiB: {res['first_error']}")
                    large.setdefault((name, "Python"), []).extend(res["latencies"])
                    go = wire_call(wire, srv.target, "affine")
                    large.setdefault((name, "Go"), []).extend(go)
                    log(f"  16 MiB: median {np.median(res['latencies']) * 1e3:.1f} ms (Python "
                        f"client), {np.median(go) * 1e3:.1f} ms (Go client)")
        for tuned in (False, True):
            name = "grpc-go echo, no model" + (" (64 MiB windows)" if tuned else "")
            lat = wire_floor(wire, tuned)
            large.setdefault((name, "Go"), []).extend(lat)
            log(f"front bench round {rnd + 1}/{rounds}: {name}: 16 MiB median "
                f"{np.median(lat) * 1e3:.1f} ms")
    best = {name: {c: max(rows, key=lambda r: r["rps"]) | {"rounds_rps": [r["rps"]
                                                                          for r in rows]}
                   for c, rows in by_c.items()} for name, by_c in cells.items()}
    nbytes = 16 * (1 << 20)
    large_rows = [{"server": name, "client": client, "median_ms": float(np.median(lat)) * 1e3,
                   "mb_s": nbytes / float(np.median(lat)) / 1e6,
                   "pct_memcpy": 100 * nbytes / float(np.median(lat)) / memcpy_16}
                  for (name, client), lat in large.items()]
    return {"workers": list(workers), "levels": best, "large_16mib": large_rows,
            "memcpy_16mib_mb_s": memcpy_16 / 1e6, "ghz": GHZ_VERSION,
            "rounds": rounds, "duration_s": duration_s}


def markdown(front: dict[str, Any], targets_: list[dict[str, Any]],
             quick: bool = False) -> list[str]:
    """The section's tables (report.markdown adds them to the run's)."""
    def f(v: float | None, d: int = 2) -> str:
        return "-" if v is None else f"{v:.{d}f}"

    py = front["levels"].get("python", {})
    lines = [
        "", f"## Native front vs `--frontend python` (issue 12; ghz {front['ghz']}, batch-8 "
        f"MLP {IN}-{HIDDEN}-{OUT} f32)", "",
        "Closed loop, one connection, the same pre-serialized request; every server's answer "
        "checked against JAX first. Server CPU = utime + stime from /proc of the server process "
        "and (front) its worker children, per completed request; ratios are to python at the "
        "same concurrency. `batching`: `mlp8_batched` (batch sizes "
        f"{','.join(map(str, BATCH_SIZES))}) with `--batching-models mlp8_batched:2000`.", "",
        "| server | conc. | req/s | vs python | p50 ms | vs python | p99 ms | server CPU ms/req "
        "| vs python | of which front / workers | errors | rounds req/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, by_c in front["levels"].items():
        for c, r in sorted(by_c.items()):
            base = py.get(c) or {}

            def rel(key: str, r: dict = r, base: dict = base) -> str:
                a, b = r.get(key), base.get(key)
                return f"{a / b:.2f}x" if a and b else "-"

            lines.append(
                f"| {name} | {c} | {r['rps']:.0f} | {rel('rps')} | {f(r['p50_ms'])} "
                f"| {rel('p50_ms')} | {f(r['p99_ms'])} | {f(r['server_cpu_ms_per_req'], 3)} "
                f"| {rel('server_cpu_ms_per_req')} | {f(r['front_cpu_ms_per_req'], 3)} / "
                f"{f(r['workers_cpu_ms_per_req'], 3)} | {r['errors']} "
                f"| {' '.join(f'{v:.0f}' for v in r.get('rounds_rps', []))} |")
    lines += ["", "16 MiB each way over the wire (elementwise model, c=1, median of the calls; "
              f"memcpy {front['memcpy_16mib_mb_s']:.0f} MB/s in this run):", "",
              "| server | client | median ms | MB/s | % of memcpy |", "|---|---|---:|---:|---:|"]
    for r in front.get("large_16mib", []):
        lines.append(f"| {r['server']} | {r['client']} | {r['median_ms']:.1f} | {r['mb_s']:.0f} "
                     f"| {r['pct_memcpy']:.2f}% |")
    if targets_:
        lines += ["", "### Targets (issue 12)", ""]
        if quick:
            lines += ["**Quick smoke run** (`--quick`: 1 s levels, one round): the ratios show "
                      "the section works; they are not measurements of the targets.", ""]
        lines += ["| target | measured | required | met |", "|---|---:|---:|---|"]
        for t in targets_:
            met = "-" if t["met"] is None else "yes" if t["met"] else "**no**"
            lines.append(f"| {t['name']} | {t['measured']} | {t['required']} | {met} |")
    return lines


def _ew_request(x: np.ndarray) -> bytes:
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

    req = pb.ModelInferRequest(model_name="ew16", id="large16")
    req.inputs.add(name="x", datatype="FP32", shape=[x.size])
    req.raw_input_contents.append(x.tobytes())
    return req.SerializeToString()


def targets(front: dict[str, Any], default_workers: int) -> list[dict[str, Any]]:
    """Issue 12's targets as ratios to the in-run `--frontend python` baseline."""
    out: list[dict[str, Any]] = []
    lv = front.get("levels", {})
    py, nat = lv.get("python", {}), lv.get(f"front {default_workers}w", {})
    batching = lv.get(f"front {default_workers}w batching", {})

    def add(name: str, value: float | None, required: str, ok: Callable[[float], bool]) -> None:
        out.append({"name": name, "measured": "-" if value is None else f"{value:.3g}",
                    "required": required, "met": None if value is None else bool(ok(value))})

    def ratio(a: dict | None, b: dict | None, key: str) -> float | None:
        if not a or not b or not a.get(key) or not b.get(key):
            return None
        return a[key] / b[key]

    w = f"front ({default_workers} worker{'s' if default_workers > 1 else ''})"
    add(f"c=16 req/s, {w} / python", ratio(nat.get(16), py.get(16), "rps"), ">= 2.50",
        lambda r: r >= 2.5)
    add(f"c=1 p50, {w} / python", ratio(nat.get(1), py.get(1), "p50_ms"), "<= 0.60",
        lambda r: r <= 0.6)
    add(f"c=16 server CPU per request, {w} / python",
        ratio(nat.get(16), py.get(16), "server_cpu_ms_per_req"), "<= 0.35", lambda r: r <= 0.35)
    large = {(r["server"], r["client"]): r["pct_memcpy"] / 100
             for r in front.get("large_16mib", [])}
    add(f"16 MiB over the wire, {w}, Go client: MB/s / memcpy MB/s",
        large.get((f"front {default_workers}w", "Go")), ">= 0.10", lambda r: r >= 0.1)
    add(f"c=64 batching req/s / no batching req/s, {w}",
        ratio(batching.get(64), nat.get(64), "rps"), ">= 3.00", lambda r: r >= 3)
    floor = lv.get(f"front {default_workers}w transport floor", {})

    def diag(name: str, value: float | None) -> None:
        out.append({"name": f"(diagnostic) {name}", "required": "-", "met": None,
                    "measured": "-" if value is None else f"{value:.3g}"})

    diag(f"c=16 req/s, {w} transport floor (ModelInfer from a cache) / python",
         ratio(floor.get(16), py.get(16), "rps"))
    diag(f"c=1 p50, {w} transport floor / python", ratio(floor.get(1), py.get(1), "p50_ms"))
    diag(f"c=16 server CPU per request, {w} transport floor / python",
         ratio(floor.get(16), py.get(16), "server_cpu_ms_per_req"))
    diag(f"16 MiB, {w}, Python client: MB/s / memcpy MB/s",
         large.get((f"front {default_workers}w", "Python")))
    diag("16 MiB, grpc-go echo with no model (the wire floor), Go client: MB/s / memcpy MB/s",
         large.get(("grpc-go echo, no model", "Go")))
    diag("16 MiB, the same echo with 64 MiB flow-control windows: MB/s / memcpy MB/s",
         large.get(("grpc-go echo, no model (64 MiB windows)", "Go")))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """This section alone: `python -m tests.bench.front [--duration S] [--rounds N]`."""
    import argparse
    import multiprocessing
    import tempfile
    from concurrent.futures import ProcessPoolExecutor

    from tests.bench import run, sysinfo

    ap = argparse.ArgumentParser(prog="python -m tests.bench.front")
    ap.add_argument("--duration", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--workers", default=",".join(map(str, WORKER_COUNTS)))
    args = ap.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="jaxport-bench-front-"))
    try:
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            res = front_vs_python(run.server, pool, work, work / "repo", args.rounds,
                                  args.duration, args.warmup,
                                  [int(w) for w in args.workers.split(",")],
                                  sysinfo.memcpy_bandwidth(16 << 20), run.log)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n".join(markdown(res, targets(res, DEFAULT_WORKERS))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
