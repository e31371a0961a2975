"""The native front under ghz (issue 12's model and cases): its native engine, its Python
workers and their floors.

In one run: `jaxport serve` as users run it (the front, built from this tree) executing the
model in its native engine (`native engine`: `--pjrt-plugin cpu`, the default, no Python on
the request path; docs/native-engine.md), the same with every model on its Python execution
workers (`front Nw`: `--pjrt-plugin none`), the transport floor (the same front and workers
answering ModelInfer from a cache, `tests/bench/floor_worker.py`: what the model core's Python
costs on top of the stack) and the grpc-go echo floor (`wire echo`: a grpc-go server answering
ModelInfer with its input, no model, no validation: what any Go server costs here).

Issue 12 compared the front with `--frontend python` (grpcio's Python server); that server is
retired (issue 25), so those ratios cannot be re-run: docs/performance.md keeps them as they
were measured. Every `jaxport serve` is one entry of `server_configs`. Issue 26's targets are
ratios of the native engine's rows to the Python workers' rows of the same run (`targets`).

Model: the issue's batch-8 MLP 64 -> 256 -> 16 f32 (`mlp8`; `mlp8_batched` exported with
batch sizes 8,64,256,512 for dynamic batching, fed the same 8-row requests). Cases:

- closed loop at c=1, 16 and 64 (ghz, one connection, pre-serialized binary request): req/s,
  p50, p99 of each server; server CPU per request from /proc (utime + stime of the front's
  process and of each worker child), split front vs workers; ratios to the transport floor;
- 16 MiB each way over the wire (the elementwise model, c=1; ghz cannot raise its 4 MiB
  receive limit): MB/s vs an in-run numpy memcpy, with the bench's Python client and with the
  jaxport Go client (`tests/bench/wire`, every answer checked), plus the floor under both: a
  grpc-go server answering with its input and no model (`wire echo`, with grpc-go's defaults
  as the front has them and with 64 MiB flow-control windows), called by the same Go client;
- dynamic batching at c=64 vs the unbatched model (the workers' batcher; the native engine's
  Go batcher at c=1, 16 and 64).

`--native-plugin` picks the native rows' plugin (`cpu`; a `.so` path, e.g. the CUDA plugin on
a GPU machine; `none` runs those rows on the workers too: a check of the harness alone).

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
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from jaxport.bridge.settings import DEFAULT_WORKERS

from tests.bench.front_launch import FLOOR_WORKER, WORKERS_ONLY, command, serve_flags

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
WORKER_COUNTS = (1, 2)  # measured side by side (the --workers default's evidence)
#: Every row's ratios are to this one (the same front and workers, no model core).
FLOOR = f"front {DEFAULT_WORKERS}w transport floor"
#: The Python workers' row issue 26's targets are ratios to (`jaxport serve --workers` default).
WORKERS = f"front {DEFAULT_WORKERS}w"
#: The native engine's rows (issue 26), unbatched and with the front's Go batcher.
NATIVE = "native engine"
NATIVE_BATCHING = "native engine batching"
#: ghz against `wire echo` (grpc-go, no model): the Go server floor.
ECHO = "grpc-go echo, no model"
LEVELS = (1, 16, 64)
NATIVE_PLUGIN_HELP = ("the native engine rows' --pjrt-plugin (cpu, cuda, a .so path; none: "
                      "those rows on the workers too, a check of the harness alone)")


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


@contextmanager
def echo_server(wire: Path, tuned: bool = False) -> Iterator[tuple[str, int]]:
    """`wire echo` (a grpc-go server answering ModelInfer with its input, no model) running
    for the block; yields its address and PID (its CPU is the echo floor's server CPU)."""
    proc = subprocess.Popen([str(wire), "echo", *(["--tuned"] if tuned else [])],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        target = proc.stdout.readline().strip()
        if not target:
            raise AssertionError(f"wire echo exited with {proc.wait()} before listening")
        yield target, proc.pid
    finally:
        proc.terminate()  # by PID, this process's own child
        proc.wait(timeout=30)


@contextmanager
def wire_echo(wire: Path, tuned: bool = False) -> Iterator[str]:
    """`echo_server`, yielding its address alone."""
    with echo_server(wire, tuned) as (target, _):
        yield target


def wire_floor(wire: Path, tuned: bool) -> list[float]:
    """The Go client against `wire echo` (no model): what grpc-go moves here."""
    with wire_echo(wire, tuned) as target:
        return wire_call(wire, target, "echo", *(["--tuned"] if tuned else []))


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
    from tests.bench.sysinfo import tree_cpu_s

    run_ghz(ghz, target, data, concurrency, warmup_s)
    own0, kids0 = tree_cpu_s(srv_pid)
    rep = run_ghz(ghz, target, data, concurrency, duration_s)
    own1, kids1 = tree_cpu_s(srv_pid)
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


@dataclass(frozen=True)
class ServerConfig:
    """One server the section measures: `jaxport serve` flags beyond the common ones, its
    worker command (None: jaxport's own workers, i.e. exactly `jaxport serve`), the model its
    load calls, the concurrency levels, and whether the 16 MiB case runs against it."""

    name: str
    flags: tuple[str, ...]
    model: str = "mlp8"
    levels: tuple[int, ...] = LEVELS
    worker_cmd: tuple[str, ...] | None = None
    large: bool = False


def server_configs(workers: Sequence[int], native_plugin: str = "cpu") -> list[ServerConfig]:
    """Every `jaxport serve` of the section, in the order measured: the Python workers
    (`--pjrt-plugin none`) with N workers, unbatched at every level and batching at 64; the
    native engine (`--pjrt-plugin native_plugin`, `jaxport serve`'s default engine), unbatched
    and batching at every level; the transport floor. `markdown` shows each against the
    transport floor, `targets` the native rows against the workers' (issue 26)."""
    batching = ("--batching-models", "mlp8_batched:2000")
    out: list[ServerConfig] = []
    for n in workers:
        flags = ("--workers", str(n), *WORKERS_ONLY)
        out += [ServerConfig(f"front {n}w", flags, large=True),
                ServerConfig(f"front {n}w batching", (*flags, *batching),
                             model="mlp8_batched", levels=(64,))]
    native = ("--workers", str(DEFAULT_WORKERS), "--pjrt-plugin", native_plugin)
    out += [ServerConfig(NATIVE, native, large=True),
            ServerConfig(NATIVE_BATCHING, (*native, *batching), model="mlp8_batched")]
    # The baseline: the same front and workers with ModelInfer answered from a cache
    # (tests/bench/floor_worker.py): the transport without the model core's Python.
    out.append(ServerConfig(FLOOR, ("--workers", str(DEFAULT_WORKERS), *WORKERS_ONLY),
                            worker_cmd=FLOOR_WORKER))
    return out


def front_section(server: ServerCtx, pool: Any, work: Path, repo: Path, rounds: int,
                  duration_s: float, warmup_s: float, workers: Sequence[int], memcpy_16: float,
                  log: Callable[[str], None], front_bin: Path, wire: Path,
                  native_plugin: str = "cpu") -> dict[str, Any]:
    """Every case of this module against the front `front_bin` (`build_front`), its native
    rows on `native_plugin`, and the Go tool `wire` (`build_wire`); returns the `front`
    section of the bench results."""
    from tests.bench import load as load_mod

    ghz = ensure_ghz()
    params = export_models(repo)
    requests: dict[str, tuple[Path, bytes, np.ndarray]] = {}
    for model in ("mlp8", "mlp8_batched"):
        raw, expected = request(params, model)
        (work / f"{model}.bin").write_bytes(raw)
        requests[model] = (work / f"{model}.bin", raw, expected)
    configs = server_configs(workers, native_plugin)
    cells: dict[str, dict[int, list[dict[str, Any]]]] = {}
    large: dict[tuple[str, str], list[float]] = {}
    x16 = np.random.default_rng(7).standard_normal(16 * (1 << 20) // 4).astype(np.float32)
    req16 = _ew_request(x16)
    exp16 = {"y": x16 * np.float32(2.0) + np.float32(0.5)}
    for rnd in range(rounds):
        for cfg in configs:
            log(f"front bench round {rnd + 1}/{rounds}: {cfg.name}")
            path, raw, expected = requests[cfg.model]
            cmd = command(front_bin, serve_flags(repo, "WARNING", cfg.flags), cfg.worker_cmd)
            models = [cfg.model, *(["ew16"] if cfg.large else [])]
            with server(cmd, work, cfg.name.replace(" ", "-"), models) as srv:
                check_answer(srv.target, raw, expected)
                for c in cfg.levels:
                    row = measure(ghz, srv.pid, srv.target, path, c, duration_s, warmup_s)
                    cells.setdefault(cfg.name, {}).setdefault(c, []).append(row)
                    _log_row(log, c, row)
                if cfg.large:
                    res = pool.submit(load_mod.run_repeats, srv.target, req16, exp16, 5,
                                      1e-6, 1e-6).result()
                    if res["errors"] or res["mismatches"]:
                        raise AssertionError(f"{cfg.name} 16 MiB: {res['first_error']}")
                    large.setdefault((cfg.name, "Python"), []).extend(res["latencies"])
                    go = wire_call(wire, srv.target, "affine")
                    large.setdefault((cfg.name, "Go"), []).extend(go)
                    log(f"  16 MiB: median {np.median(res['latencies']) * 1e3:.1f} ms (Python "
                        f"client), {np.median(go) * 1e3:.1f} ms (Go client)")
        # The Go server floor under the same load: ghz against `wire echo` (its answer is
        # the request's input, so it is not checked against JAX).
        log(f"front bench round {rnd + 1}/{rounds}: {ECHO}")
        with echo_server(wire) as (target, pid):
            for c in LEVELS:
                row = measure(ghz, pid, target, requests["mlp8"][0], c, duration_s, warmup_s)
                cells.setdefault(ECHO, {}).setdefault(c, []).append(row)
                _log_row(log, c, row)
        for tuned in (False, True):
            name = ECHO + (" (64 MiB windows)" if tuned else "")
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
    return {"workers": list(workers), "native_plugin": native_plugin, "levels": best,
            "large_16mib": large_rows,
            "memcpy_16mib_mb_s": memcpy_16 / 1e6, "ghz": GHZ_VERSION,
            "rounds": rounds, "duration_s": duration_s}


def _log_row(log: Callable[[str], None], c: int, row: dict[str, Any]) -> None:
    log(f"  c={c}: {row['rps']:.0f} req/s p50 {row['p50_ms'] or 0:.2f} ms "
        f"p99 {row['p99_ms'] or 0:.2f} ms cpu/req {row['server_cpu_ms_per_req'] or 0:.3f} ms "
        f"(front {row['front_cpu_ms_per_req'] or 0:.3f}) errors {row['errors']} "
        f"{row['first_error']}")


def markdown(front: dict[str, Any], targets_: list[dict[str, Any]],
             quick: bool = False) -> list[str]:
    """The section's tables (report.markdown adds them to the run's)."""
    def f(v: float | None, d: int = 2) -> str:
        return "-" if v is None else f"{v:.{d}f}"

    floor = front["levels"].get(FLOOR, {})
    lines = [
        "", f"## Native front: the native engine, the Python workers and the floors (ghz "
        f"{front['ghz']}, batch-8 MLP {IN}-{HIDDEN}-{OUT} f32)", "",
        f"`jaxport serve` executing the model in the front's native engine (`{NATIVE}`: "
        "`--pjrt-plugin cpu`, the default: PJRT C API, no Python on the request path), the same "
        "with every model on N Python workers (`front Nw`: `--pjrt-plugin none`), its transport "
        f"floor (`{FLOOR}`: the same front and workers answering ModelInfer from a cache, no "
        f"model core) and the grpc-go echo floor (`{ECHO}`: a grpc-go server answering with "
        "its input). Closed loop, one connection, the same pre-serialized request; every "
        "`jaxport serve`'s answer checked against JAX first. Server CPU = utime + stime from "
        "/proc of the server's process and its worker children, per completed request; ratios "
        "are to the transport floor at the same concurrency. `batching`: `mlp8_batched` (batch "
        f"sizes {','.join(map(str, BATCH_SIZES))}) with `--batching-models mlp8_batched:2000` "
        "(the workers' batcher, or the front's Go batcher for the native engine). (Issue 12's "
        "ratios to `--frontend python` cannot be re-run: that server is retired.)",
        "",
        "| server | conc. | req/s | vs floor | p50 ms | vs floor | p99 ms | server CPU ms/req "
        "| vs floor | of which front / workers | errors | rounds req/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, by_c in front["levels"].items():
        for c, r in sorted(by_c.items()):
            base = floor.get(c) or {}

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
        lines += ["", "### Targets (issue 12's that stand without the retired server; issue "
                  "26's: the native engine against the Python workers of the same run)", ""]
        if quick:
            lines += ["**Quick smoke run** (`--quick`: 1 s levels, one round): the ratios show "
                      "the section works; they are not measurements of the targets.", ""]
        if front.get("native_plugin") == "none":
            lines += [f"**Harness check** (`--native-plugin none`): the `{NATIVE}` rows ran on "
                      "the Python workers, so issue 26's ratios measure nothing.", ""]
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


def targets(front: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 12's targets that are not ratios to the retired `--frontend python` (16 MiB
    against memcpy, batching against no batching), issue 26's (the native engine against the
    Python workers' row of the same run: req/s at c=16 >= 1.6x, p50 at c=1 <= 0.6x, server CPU
    per request at c=16 <= 0.5x; the native engine with batching at c=64 >= 3x its unbatched
    rate), and as diagnostics the front against the transport floor, the native engine against
    the grpc-go echo floor, and the wire floor."""
    out: list[dict[str, Any]] = []
    lv = front.get("levels", {})
    nat = lv.get(WORKERS, {})
    batching = lv.get(f"{WORKERS} batching", {})
    floor = lv.get(FLOOR, {})
    native, native_batching, echo_lv = lv.get(NATIVE, {}), lv.get(NATIVE_BATCHING, {}), \
        lv.get(ECHO, {})

    def add(name: str, value: float | None, required: str, ok: Callable[[float], bool]) -> None:
        out.append({"name": name, "measured": "-" if value is None else f"{value:.3g}",
                    "required": required, "met": None if value is None else bool(ok(value))})

    def diag(name: str, value: float | None) -> None:
        out.append({"name": f"(diagnostic) {name}", "required": "-", "met": None,
                    "measured": "-" if value is None else f"{value:.3g}"})

    def ratio(a: dict | None, b: dict | None, key: str) -> float | None:
        if not a or not b or not a.get(key) or not b.get(key):
            return None
        return a[key] / b[key]

    w = f"front ({DEFAULT_WORKERS} worker{'s' if DEFAULT_WORKERS > 1 else ''})"
    large = {(r["server"], r["client"]): r["pct_memcpy"] / 100
             for r in front.get("large_16mib", [])}
    go16 = large.get((WORKERS, "Go"))
    add(f"16 MiB over the wire, {w}, Go client: MB/s / memcpy MB/s", go16, ">= 0.10",
        lambda r: r >= 0.1)
    add(f"c=64 batching req/s / no batching req/s, {w}",
        ratio(batching.get(64), nat.get(64), "rps"), ">= 3.00", lambda r: r >= 3)
    n = f"{NATIVE} / {w}"
    add(f"c=16 req/s, {n}", ratio(native.get(16), nat.get(16), "rps"), ">= 1.60",
        lambda r: r >= 1.6)
    add(f"c=1 p50, {n}", ratio(native.get(1), nat.get(1), "p50_ms"), "<= 0.60",
        lambda r: r <= 0.6)
    add(f"c=16 server CPU per request, {n}",
        ratio(native.get(16), nat.get(16), "server_cpu_ms_per_req"), "<= 0.50",
        lambda r: r <= 0.5)
    add(f"c=64 req/s, {NATIVE_BATCHING} / {NATIVE} (unbatched)",
        ratio(native_batching.get(64), native.get(64), "rps"), ">= 3.00", lambda r: r >= 3)
    diag(f"c=16 req/s, {NATIVE} / {ECHO}", ratio(native.get(16), echo_lv.get(16), "rps"))
    diag(f"c=1 p50, {NATIVE} / {ECHO}", ratio(native.get(1), echo_lv.get(1), "p50_ms"))
    diag(f"c=16 server CPU per request, {NATIVE} / {ECHO}",
         ratio(native.get(16), echo_lv.get(16), "server_cpu_ms_per_req"))
    diag(f"c=16 req/s, {w} / transport floor (ModelInfer from a cache)",
         ratio(nat.get(16), floor.get(16), "rps"))
    diag(f"c=1 p50, {w} / transport floor", ratio(nat.get(1), floor.get(1), "p50_ms"))
    diag(f"c=16 server CPU per request, {w} / transport floor",
         ratio(nat.get(16), floor.get(16), "server_cpu_ms_per_req"))
    diag(f"16 MiB, {w}, Python client: MB/s / memcpy MB/s",
         large.get((WORKERS, "Python")))
    echo = large.get((ECHO, "Go"))
    diag("16 MiB, grpc-go echo with no model (the wire floor), Go client: MB/s / memcpy MB/s",
         echo)
    diag("16 MiB, the same echo with 64 MiB flow-control windows: MB/s / memcpy MB/s",
         large.get((f"{ECHO} (64 MiB windows)", "Go")))
    diag(f"16 MiB, {w}, Go client: MB/s / the wire floor's MB/s",
         go16 / echo if go16 and echo else None)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """This section alone: `python -m tests.bench.front [--quick] [--duration S] [--rounds N]`."""
    import argparse
    import multiprocessing
    import tempfile
    from concurrent.futures import ProcessPoolExecutor

    from tests.bench import run, sysinfo

    ap = argparse.ArgumentParser(prog="python -m tests.bench.front",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=5.0, help="measured seconds per level")
    ap.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds per level")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--workers", default=",".join(map(str, WORKER_COUNTS)),
                    help="worker counts measured side by side")
    ap.add_argument("--quick", action="store_true",
                    help="short smoke run: 1 s levels, 0.3 s warm-up, one round")
    ap.add_argument("--native-plugin", default="cpu", help=NATIVE_PLUGIN_HELP)
    args = ap.parse_args(argv)
    if args.quick:
        args.duration, args.warmup, args.rounds = 1.0, 0.3, 1
    work = Path(tempfile.mkdtemp(prefix="jaxport-bench-front-"))
    try:
        front_bin, wire = build_front(), build_wire()
        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
            res = front_section(run.server, pool, work, work / "repo", args.rounds,
                                args.duration, args.warmup,
                                [int(w) for w in args.workers.split(",")],
                                sysinfo.memcpy_bandwidth(16 << 20), run.log, front_bin, wire,
                                args.native_plugin)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n".join(markdown(res, targets(res), quick=args.quick)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
