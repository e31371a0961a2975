"""`make bench`: measure the bridge next to its own floors in ONE run and write the results.

The bridge is `jaxport serve` as users run it: the native front (`jaxport-front`, built from
this tree once per run into build/bench/bin, so every row measures the current source) and
its Python execution workers (`--workers` default, 2). Configurations (closed loop,
concurrency levels 1/4/16/64, every response checked):
1. compute floor: the artifact's `Exported` called in-process (params resident, compiled once);
2. transport floor: the same front and workers answering ModelInfer from a cache
   (`tests/bench/floor_worker.py`): framing, parsing and serializing without the model core;
3. bridge `--engine exported`;  4. bridge `--engine pjrt`;  5. bridge with dynamic batching.
Plus the native front section under ghz (`tests/bench/front.py`: the batch-8 MLP of issue 12
against its transport floor, 16 MiB through the Go client against a grpc-go echo).
Plus large tensors (1/16/64 MiB) against memcpy, cold start phases, and the exporter's weight
write throughput against np.save and its peak RSS for 1 GiB of parameters.
Server CPU is the front's process and its workers (`sysinfo.tree_cpu_s`).

Load comes from a separate process (asyncio gRPC client) so it does not share a GIL with the
server; its CPU is reported. Outputs: bench-results/<timestamp>.{json,md,png}.
Usage: `.venv/bin/python -m tests.bench.run [--duration S] [--levels 1,4,16,64] [--quick]`.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tests.bench import front as front_mod
from tests.bench import load as load_mod
from tests.bench import models, report, shm_client, sysinfo
from tests.bench.front_launch import FLOOR_WORKER, WORKERS_ONLY, command, serve_flags

ROOT = Path(__file__).resolve().parents[2]
MIB = 1 << 20
N_DISTINCT = 16  # distinct request payloads per configuration, used round-robin
MLP_TOL = {"rtol": 1e-4, "atol": 1e-4}  # f32; engines may fuse/reorder the matmuls
BATCH_SIZES = (1, 8, 32)


def log(msg: str) -> None:
    """Progress to stderr (the table goes to stdout)."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------------------------------
# artifacts


def export_models(work: Path, quick: bool) -> dict[str, Any]:
    """Export every benchmark model into a bridge repository (`repo/<model>/1`)."""
    import jax
    from jaxport.exporter import export

    repo = work / "repo"
    params = models.mlp_params()
    x_spec = jax.ShapeDtypeStruct((1, models.MLP_IN), np.float32)
    log("exporting mlp (batch 1) and mlp_batched (batch sizes 1,8,32)")
    export(models.mlp, params, {"x": x_spec}, repo / "mlp" / "1", output_names=["y"],
           name="mlp", quiet=True)
    export(models.mlp, params, {"x": x_spec}, repo / "mlp_batched" / "1", output_names=["y"],
           name="mlp_batched", quiet=True, batch_sizes=BATCH_SIZES)
    sizes = (1, 16) if quick else (1, 16, 64)
    for mib in sizes:
        spec = jax.ShapeDtypeStruct((mib * MIB // 4,), np.float32)
        export(models.elementwise, models.elementwise_params(), {"x": spec},
               repo / f"ew{mib}" / "1", output_names=["y"], name=f"ew{mib}", quiet=True,
               goldens=1)
    return {"repo": repo, "mlp_params": params, "large_sizes": sizes}


def mlp_requests(params: dict[str, np.ndarray], model: str) -> tuple[list[bytes], list[dict]]:
    """N_DISTINCT serialized batch-1 requests for `model` and their JAX-computed outputs."""
    import jax
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

    rng = np.random.default_rng(42)
    f = jax.jit(models.mlp)
    reqs, expected = [], []
    for i in range(N_DISTINCT):
        x = rng.standard_normal((1, models.MLP_IN)).astype(np.float32)
        req = pb.ModelInferRequest(model_name=model, id=f"r{i}")
        req.inputs.add(name="x", datatype="FP32", shape=list(x.shape))
        req.raw_input_contents.append(x.astype("<f4").tobytes())
        reqs.append(req.SerializeToString())
        expected.append({"y": np.asarray(f(params, x))})
    return reqs, expected


# ------------------------------------------------------------------------------------------
# processes


@dataclass
class Server:
    """A server process under test."""

    proc: subprocess.Popen
    pid: int
    port: int
    started: float
    ready: float
    log_path: Path

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"


def _wait_ready(target: str, models_: Sequence[str], deadline: float, proc: subprocess.Popen,
                log_path: Path) -> None:
    import grpc
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
    from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pbg

    with grpc.insecure_channel(target) as ch:
        stub = pbg.GRPCInferenceServiceStub(ch)
        pending = list(models_)
        while pending:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}; log {log_path}:\n"
                                   + log_path.read_text()[-3000:])
            if time.monotonic() > deadline:
                raise RuntimeError(f"models {pending} not ready in time; log {log_path}")
            try:
                if stub.ModelReady(pb.ModelReadyRequest(name=pending[0]), timeout=2).ready:
                    pending.pop(0)
                    continue
            except grpc.RpcError:
                pass
            time.sleep(0.05)


@contextmanager
def server(cmd: list[str], work: Path, name: str, models_: Sequence[str],
           env: dict[str, str] | None = None) -> Iterator[Server]:
    """Start `cmd` (which must take --port-file), wait for its models, stop it by PID."""
    port_file = work / f"{name}.port.json"
    log_path = work / f"{name}.log"
    port_file.unlink(missing_ok=True)
    full = [*cmd, "--port-file", str(port_file)]
    t0 = time.monotonic()
    with open(log_path, "wb") as logf:
        proc = subprocess.Popen(full, stdout=logf, stderr=subprocess.STDOUT, cwd=ROOT,
                                env={**os.environ, **(env or {})})
    try:
        deadline = t0 + 600
        while not port_file.exists() or not port_file.read_text().strip().endswith("}"):
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n"
                                   + log_path.read_text()[-3000:])
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} wrote no port file; log {log_path}")
            time.sleep(0.02)
        info = json.loads(port_file.read_text())
        srv = Server(proc, proc.pid, int(info["grpc_port"]), t0, 0.0, log_path)
        _wait_ready(srv.target, models_, deadline, proc, log_path)
        srv.ready = time.monotonic()
        yield srv
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def bridge_cmd(repo: Path, *extra: str, front: Path | None = None) -> list[str]:
    """`jaxport serve` with the front `front` (None: the one it picks), flags `serve_flags`,
    every model on the Python workers (`WORKERS_ONLY`: these sections compare the workers'
    engines; the native engine's rows are in `tests/bench/front.py`); INFO logs the load
    phases (`cold_start_phases`)."""
    return command(front, serve_flags(repo, "INFO", [*WORKERS_ONLY, *extra]))


def floor_cmd(repo: Path, *extra: str, front: Path | None = None) -> list[str]:
    """The transport floor: `bridge_cmd`'s front and flags, workers answering ModelInfer from
    a cache (`tests/bench/floor_worker.py`)."""
    return command(front, serve_flags(repo, "WARNING", [*WORKERS_ONLY, *extra]), FLOOR_WORKER)


# ------------------------------------------------------------------------------------------
# measuring


def grpc_levels(pool: ProcessPoolExecutor, srv: Server, requests: list[bytes],
                expected: list[dict], levels: Sequence[int], duration: float, warmup: float,
                tol: dict[str, float]) -> list[dict[str, Any]]:
    """Each concurrency level: closed loop from the load process, server CPU from /proc (the
    front's process and its workers; split into the front, the workers' XLA threads and the
    workers' rest), and rows per program execution (ModelStatistics)."""
    rows = []
    model = _model_of(requests[0])
    for conc in levels:
        spec = load_mod.LoadSpec(srv.target, requests, expected, conc, duration, warmup, **tol)
        stats0 = _execution_counts(srv.target, model)
        front0, workers0 = sysinfo.tree_cpu_s(srv.pid)
        threads0 = sysinfo.tree_thread_cpu_s(srv.pid)
        res: load_mod.LoadResult = pool.submit(load_mod.run_grpc_load, spec).result()
        front1, workers1 = sysinfo.tree_cpu_s(srv.pid)
        xla = sysinfo.xla_cpu_s(threads0, sysinfo.tree_thread_cpu_s(srv.pid))
        stats1 = _execution_counts(srv.target, model)
        row = res.summary()
        n = res.completed_total
        front, workers = front1 - front0, workers1 - workers0
        row["server_cpu_s_per_req"] = (front + workers) / n if n else None
        row["server_front_cpu_s_per_req"] = front / n if n else None
        row["server_xla_cpu_s_per_req"] = xla / n if n else None
        row["server_other_cpu_s_per_req"] = (workers - xla) / n if n else None
        if stats0 and stats1 and stats1[1] > stats0[1]:
            row["rows_per_execution"] = (stats1[0] - stats0[0]) / (stats1[1] - stats0[1])
        row["loadavg_1m"] = os.getloadavg()[0]
        rows.append(row)
        log(f"  c={conc}: {row['rps']:.0f} req/s p50 {row['p50_ms'] or 0:.2f} ms "
            f"p99 {row['p99_ms'] or 0:.2f} ms errors {row['errors']} mismatches "
            f"{row['mismatches']} {row['first_error']}")
    return rows


def _model_of(serialized_request: bytes) -> str:
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

    return pb.ModelInferRequest.FromString(serialized_request).model_name


def _execution_counts(target: str, model: str) -> tuple[int, int] | None:
    """(inference_count, execution_count) of `model` from ModelStatistics (the front sums
    its workers'); None when the call fails. The transport floor's workers answer it too, with
    the counts of the first request per id (the ones not answered from the cache)."""
    import grpc
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
    from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc

    with grpc.insecure_channel(target) as channel:
        try:
            stats = pb_grpc.GRPCInferenceServiceStub(channel).ModelStatistics(
                pb.ModelStatisticsRequest(name=model), timeout=10)
        except grpc.RpcError:
            return None
    total = [(s.inference_count, s.execution_count) for s in stats.model_stats]
    return (sum(i for i, _ in total), sum(e for _, e in total)) if total else None


def _compute_floor_worker(artifact: str, xs: list[np.ndarray], expected: list[dict],
                          levels: Sequence[int], duration: float, warmup: float,
                          tol: dict[str, float], dispatch: str = "async"
                          ) -> list[dict[str, Any]]:
    """In a fresh process: deserialize the artifact's Exported, params resident, jit once,
    then a closed loop of threads calling it directly (no gRPC).

    `dispatch`: "async" (JAX's default: XLA's execute threads run the program) or "sync" (the
    calling thread runs it, as in the bridge). Neither wins everywhere: sync is faster alone,
    async when many threads call at once with no admission control.
    """
    import jax
    from jax import export as jax_export
    from jaxport.artifact import manifest as manifest_io
    from jaxport.artifact import weights as weights_io
    from jaxport.artifact.gen import manifest_pb2
    from jaxport.bridge.engines import configure_jax

    configure_jax()  # the bridge's settings, then the dispatch mode under test
    jax.config.update("jax_cpu_enable_async_dispatch", dispatch == "async")
    path = Path(artifact)
    manifest = manifest_io.load(path)
    program = manifest.programs[0]
    exp = jax_export.deserialize(bytearray((path / program.jaxexport_file).read_bytes()))
    values = weights_io.read_parameters(path, program)
    param_args = [a for a in program.arguments if a.role == manifest_pb2.ARGUMENT_ROLE_PARAMETER]
    input_leaf = next(a.leaf_index for a in program.arguments
                      if a.role == manifest_pb2.ARGUMENT_ROLE_INPUT)
    fixed = {a.leaf_index: jax.device_put(v) for a, v in zip(param_args, values, strict=True)}
    n_leaves = len(exp.in_avals)

    def fn(fixed_leaves: dict[int, jax.Array], x: jax.Array) -> Any:
        leaves = [fixed_leaves.get(i) for i in range(n_leaves)]
        leaves[input_leaf] = x
        args, kwargs = jax.tree.unflatten(exp.in_tree, leaves)
        return exp.call(*args, **kwargs)

    f = jax.jit(fn)

    def call(k: int) -> None:
        k %= len(xs)
        y = np.asarray(f(fixed, xs[k]))
        if not np.allclose(y, expected[k]["y"], **tol):
            raise AssertionError(f"compute floor output {k} differs from JAX")

    call(0)
    rows = []
    for conc in levels:
        cpu0 = time.process_time()
        threads0 = sysinfo.thread_cpu_s(os.getpid())
        res = load_mod.run_inprocess_load(call, conc, duration, warmup)
        cpu = time.process_time() - cpu0
        xla = sysinfo.xla_cpu_s(threads0, sysinfo.thread_cpu_s(os.getpid()))
        row = res.summary()
        n = res.completed_total
        row["server_cpu_s_per_req"] = cpu / n if n else None
        row["server_xla_cpu_s_per_req"] = xla / n if n else None
        row["server_other_cpu_s_per_req"] = (cpu - xla) / n if n else None
        row["dispatch"] = dispatch
        row["client_cpu_s_per_req"] = None  # caller and callee are the same process
        rows.append(row)
    return rows


# ------------------------------------------------------------------------------------------
# large tensors, cold start, exporter


def large_tensors(pool: ProcessPoolExecutor, targets: dict[str, Server], sizes: Sequence[int],
                  memcpy: dict[int, float], repeats: int, shm: Server | None = None,
                  echo: str | None = None) -> list[dict[str, Any]]:
    """Concurrency 1, f32 vectors of N MiB each way: payload MB per second of RPC time, for the
    bridge and the transport floor, next to memcpy and (`echo`: the address of `wire echo`, a
    grpc-go server answering ModelInfer with its input and no model behind it) what grpc-go
    itself moves for the same client; with `shm` (a bridge with --system-shared-memory) also
    through shared memory, timed as client copy in + ModelInfer + client copy out
    (`tests/bench/shm_client.py`)."""
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

    rows = []
    rng = np.random.default_rng(7)
    for mib in sizes:
        nbytes = mib * MIB
        x = rng.standard_normal(nbytes // 4).astype(np.float32)
        req = pb.ModelInferRequest(model_name=f"ew{mib}", id=f"large{mib}")
        req.inputs.add(name="x", datatype="FP32", shape=[x.size])
        req.raw_input_contents.append(x.tobytes())
        raw = req.SerializeToString()
        expected = {"y": x * np.float32(2.0) + np.float32(0.5)}
        row: dict[str, Any] = {"mib": mib, "memcpy_mb_s": memcpy[mib] / 1e6}
        cases = {name: (srv.target, expected, 1e-6) for name, srv in targets.items()}
        if echo is not None:
            cases["grpc_go_echo"] = (echo, {"y": x}, 0.0)  # y = x exactly
        for name, (target, want, tol) in cases.items():
            res = pool.submit(load_mod.run_repeats, target, raw, want, repeats,
                              tol, tol).result()
            row[f"{name}_mb_s"] = _mb_s(nbytes, res["latencies"])
            row[f"{name}_p50_ms"] = (float(np.median(res["latencies"]) * 1e3)
                                     if res["latencies"] else None)
            row["errors"] = row.get("errors", 0) + res["errors"] + res["mismatches"]
            row["first_error"] = row.get("first_error") or res["first_error"]
        if shm is not None:
            res = pool.submit(shm_client.run_shm_repeats, shm.target, f"ew{mib}", x, repeats,
                              1e-6, 1e-6).result()
            row["shm_mb_s"] = _mb_s(nbytes, res["latencies"])
            row["shm_p50_ms"] = (float(np.median(res["latencies"]) * 1e3)
                                 if res["latencies"] else None)
            row["shm_pct_memcpy"] = 100 * (row["shm_mb_s"] or 0.0) / row["memcpy_mb_s"]
            row["errors"] = row.get("errors", 0) + res["errors"] + res["mismatches"]
            row["first_error"] = row.get("first_error") or res["first_error"]
        bridge = row.get("bridge_mb_s") or 0.0
        row["pct_memcpy"] = 100 * bridge / row["memcpy_mb_s"]
        rows.append(row)
        log(f"  {mib} MiB: " + ", ".join(f"{k} {v:.0f}" for k, v in row.items()
                                         if k.endswith("_mb_s") and v is not None)
            + f" MB/s; bridge = {row['pct_memcpy']:.1f}% of memcpy"
            + (f", shared memory = {row['shm_pct_memcpy']:.1f}%" if shm is not None else "")
            + f"; errors {row['errors']} "
            f"{row['first_error']}")
    return rows


def _mb_s(nbytes: int, latencies: Sequence[float]) -> float | None:
    return nbytes / float(np.median(latencies)) / 1e6 if latencies else None


def _exporter_worker(work: str, total_bytes: int) -> dict[str, float | str]:
    """Exporter figures: weight writes vs np.save (A/B in this process), then the peak RSS of
    a full export in a fresh process per kind of params (numpy, jax.Array, Orbax-restored)."""
    from jaxport.artifact import weights as weights_io
    from jaxport.exporter.write import fsync_tree

    params = models.big_params(total_bytes)
    nbytes = sum(a.nbytes for a in params.values())
    out: dict[str, float | str] = {"param_bytes_gib": nbytes / 2**30}

    def weights_write(d: Path, params: dict[str, np.ndarray]) -> None:
        for name, a in params.items():
            weights_io.write_parameter(d, f"weights/{name}", a)

    def np_save(d: Path, params: dict[str, np.ndarray]) -> None:
        d.mkdir(parents=True)
        for name, a in params.items():
            np.save(d / f"{name}.npy", a)

    # Neither writer fsyncs; `export` makes the artifact durable with one fsync pass
    # (`fsync_tree`) before its rename, timed here separately after each write, for both.
    # Each write starts after `os.sync()` (untimed) so no earlier round's dirty pages are being
    # written back during it; the order alternates; each writer keeps its best round (other
    # processes on the machine only ever slow a round down). An untimed first write takes the
    # VM's first-touch cost of fresh page-cache memory (3-4 s per GiB here) out of round 1.
    writers = {"weights": weights_write, "np_save": np_save}
    np_save(Path(work) / "warm-up", params)
    shutil.rmtree(Path(work) / "warm-up")
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in writers}
    for rnd in range(_EXPORTER_WRITE_ROUNDS):
        for name in sorted(writers, reverse=bool(rnd % 2)):
            d = Path(work) / f"{name}-{rnd}"
            os.sync()
            t0 = time.perf_counter()
            writers[name](d, params)
            t1 = time.perf_counter()
            fsync_tree(d)
            times[name].append((t1 - t0, time.perf_counter() - t1))
            shutil.rmtree(d)
    del params
    best = {k: min(w for w, _ in v) for k, v in times.items()}
    best_durable = {k: min(w + f for w, f in v) for k, v in times.items()}
    out["weights_write_mb_s"] = nbytes / best["weights"] / 1e6
    out["np_save_mb_s"] = nbytes / best["np_save"] / 1e6
    out["weights_vs_np_save"] = best["np_save"] / best["weights"]
    out["weights_fsync_pass_s"] = float(np.median([f for _, f in times["weights"]]))
    out["np_save_fsync_pass_s"] = float(np.median([f for _, f in times["np_save"]]))
    out["weights_plus_fsync_vs_np_save_plus_fsync"] = (
        best_durable["np_save"] / best_durable["weights"])
    out["weights_vs_np_save_median_of_rounds"] = float(np.median(
        [n[0] / w[0] for w, n in zip(times["weights"], times["np_save"], strict=True)]))
    for k, v in times.items():
        out[f"{k}_rounds_write_fsync_s"] = " ".join(f"{w:.2f}+{f:.2f}" for w, f in v)

    spawn = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=spawn) as ex:
        ex.submit(_exporter_orbax_save, work, total_bytes).result()
    for kind in ("numpy", "jax", "orbax"):
        with ProcessPoolExecutor(1, mp_context=spawn) as ex:
            case = ex.submit(_exporter_rss_case, work, total_bytes, kind).result()
        out.update({f"{kind}_{k}": v for k, v in case.items()})
    shutil.rmtree(Path(work) / "orbax-ckpt", ignore_errors=True)
    return out


_EXPORTER_WRITE_ROUNDS = 7


def _exporter_orbax_save(work: str, total_bytes: int) -> None:
    """An Orbax checkpoint of `big_params`, as a training job would leave it."""
    import orbax.checkpoint as ocp

    ckpt = ocp.StandardCheckpointer()
    ckpt.save((Path(work) / "orbax-ckpt").resolve(), models.big_params_jax(total_bytes))
    ckpt.wait_until_finished()


def _exporter_rss_case(work: str, total_bytes: int, kind: str) -> dict[str, float]:
    """In a fresh process: build or restore the params (`kind`: numpy, jax, orbax), then export
    them. Peak RSS (VmHWM) of the whole process, and from the start of `export` alone (the
    high-water mark is reset there through /proc/self/clear_refs)."""
    import jax
    from jaxport.exporter import export

    base = sysinfo.process_rss_bytes(os.getpid())[0]
    if kind == "numpy":
        params: Any = models.big_params(total_bytes)
    elif kind == "jax":
        params = models.big_params_jax(total_bytes)
    else:
        import orbax.checkpoint as ocp

        params = ocp.StandardCheckpointer().restore((Path(work) / "orbax-ckpt").resolve())
        assert all(isinstance(a, jax.Array) for a in jax.tree.leaves(params))
    nbytes = sum(a.nbytes for a in jax.tree.leaves(params))
    ready, ready_peak = sysinfo.process_rss_bytes(os.getpid())
    Path("/proc/self/clear_refs").write_text("5")
    x = jax.ShapeDtypeStruct((1, 4096), np.float32)
    t0 = time.perf_counter()
    export(models.big_params_fn, params, {"x": x}, Path(work) / f"big-{kind}", quiet=True,
           goldens=1)
    seconds = time.perf_counter() - t0
    export_peak = sysinfo.process_rss_bytes(os.getpid())[1]
    shutil.rmtree(Path(work) / f"big-{kind}", ignore_errors=True)
    return {
        "baseline_rss_gib": base / 2**30,
        "params_ready_rss_gib": ready / 2**30,
        "export_s": seconds,
        "peak_rss_gib": max(ready_peak, export_peak) / 2**30,
        "peak_rss_over_param_bytes": max(ready_peak, export_peak) / nbytes,
        "export_peak_rss_over_param_bytes": export_peak / nbytes,
        "export_peak_minus_params_ready_over_param_bytes": (export_peak - ready) / nbytes,
    }


# ------------------------------------------------------------------------------------------
# targets


def _level(cfg: dict[str, Any], conc: int) -> dict[str, Any] | None:
    return next((lv for lv in cfg["levels"] if lv["concurrency"] == conc), None)


def _two_core_ceiling(results: dict[str, Any], compute: dict[str, Any] | None,
                      transport: dict[str, Any] | None) -> float | None:
    """Requests/s no bridge can exceed here: the machine's cores divided by the CPU one request
    needs at least, i.e. the computation (compute floor) plus the transport's server and
    client side (transport floor), all sharing the same cores."""
    if not (compute and transport):
        return None
    parts = (compute.get("server_cpu_s_per_req"), transport.get("server_cpu_s_per_req"),
             transport.get("client_cpu_s_per_req"))
    if not all(parts):
        return None
    return results["machine"]["affinity"] / sum(parts)


def evaluate_targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 5's targets as ratios from this run."""
    by = {c["name"]: c for c in results["configs"]}
    out = []

    def add(name: str, measured: float | None, required: str, met: bool | None) -> None:
        out.append({"name": name, "measured": "-" if measured is None else f"{measured:.3g}",
                    "required": required, "met": None if met is None else bool(met)})

    comp, tran = by.get("compute floor"), by.get("transport floor")
    for bridge in ("bridge exported", "bridge pjrt"):
        b = by.get(bridge)
        if not (b and comp and tran):
            continue
        lb, lc, lt = _level(b, 1), _level(comp, 1), _level(tran, 1)
        if lb and lc and lt and lb["p50_ms"] and lc["p50_ms"] and lt["p50_ms"]:
            r = lb["p50_ms"] / (lc["p50_ms"] + lt["p50_ms"])
            add(f"c=1 {bridge} p50 / (transport p50 + compute p50)", r, "<= 1.30", r <= 1.3)
        lb, lc, lt = _level(b, 16), _level(comp, 16), _level(tran, 16)
        if lb and lc and lt:
            floor = min(lc["rps"], lt["rps"])
            r = lb["rps"] / floor if floor else None
            add(f"c=16 {bridge} rps / min(transport, compute) rps", r, ">= 0.80",
                r is not None and r >= 0.8)
            parts = [lv.get("server_cpu_s_per_req") for lv in (lb, lc, lt)]
            if all(parts):
                add(f"(diagnostic) c=16 {bridge} server CPU/req / (compute + transport "
                    "CPU/req)", parts[0] / (parts[1] + parts[2]), "-", None)
            ceiling = _two_core_ceiling(results, lc, lt)
            if ceiling:
                add(f"(diagnostic) c=16 {bridge} rps / ceiling of any bridge on these cores",
                    lb["rps"] / ceiling, "-", None)
    lc, lt = _level(comp, 16) if comp else None, _level(tran, 16) if tran else None
    ceiling = _two_core_ceiling(results, lc, lt) if lc and lt else None
    if ceiling and lc and lt:
        add("(diagnostic) c=16 ceiling of any bridge on these cores / min(transport, compute) "
            "rps", ceiling / min(lc["rps"], lt["rps"]), "-", None)
    for row in results.get("large", []):
        if row["mib"] == 16:
            add("16 MiB ModelInfer MB/s / memcpy MB/s (over the wire)", row["pct_memcpy"] / 100,
                ">= 0.25", row["pct_memcpy"] >= 25)
            if row.get("shm_pct_memcpy") is not None:
                add("16 MiB ModelInfer MB/s / memcpy MB/s (system shared memory, incl. client "
                    "copies)", row["shm_pct_memcpy"] / 100, ">= 0.25", row["shm_pct_memcpy"] >= 25)
    b, nb = by.get("bridge batching"), by.get("bridge exported")
    if b and nb and _level(b, 64) and _level(nb, 64):
        lb, ln = _level(b, 64), _level(nb, 64)
        r = lb["rps"] / ln["rps"] if ln["rps"] else None
        add("c=64 batching rps / no-batching rps", r, ">= 3.00", r is not None and r >= 3)
        if lb["p99_ms"] and ln["p99_ms"]:
            r = lb["p99_ms"] / ln["p99_ms"]
            add("c=64 batching p99 / no-batching p99", r, "<= 2.00", r <= 2)
        if lb.get("rows_per_execution"):
            add(f"(diagnostic) c=64 batching: real rows per program execution (largest "
                f"program {max(BATCH_SIZES)})", lb["rows_per_execution"], "-", None)
    e = results.get("exporter") or {}
    if "weights_vs_np_save" in e:
        add("exporter weight write / np.save throughput (neither fsyncs)",
            e["weights_vs_np_save"], ">= 0.80", e["weights_vs_np_save"] >= 0.8)
        add("(diagnostic) exporter weights + fsync pass / np.save + fsync",
            e["weights_plus_fsync_vs_np_save_plus_fsync"], "-", None)
    for kind, label in (("jax", "jax.Array params"), ("orbax", "Orbax-restored params"),
                        ("numpy", "numpy params")):
        if f"{kind}_peak_rss_over_param_bytes" in e:
            r = e[f"{kind}_peak_rss_over_param_bytes"]
            add(f"exporter peak RSS / parameter bytes, {label}", r, "<= 1.50", r <= 1.5)
    return out


# ------------------------------------------------------------------------------------------
# main


def main(argv: Sequence[str] | None = None) -> int:
    """Run everything, write bench-results/<timestamp>.{json,md,png}, print the tables."""
    ap = argparse.ArgumentParser(prog="make bench", description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=6.0, help="measured seconds per level")
    ap.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds per level")
    ap.add_argument("--levels", default="1,4,16,64", help="concurrency levels")
    ap.add_argument("--out", type=Path, default=ROOT / "bench-results")
    ap.add_argument("--quick", action="store_true",
                    help="short smoke run: 1 s levels, no 64 MiB, 256 MiB exporter model")
    ap.add_argument("--rounds", type=int, default=2,
                    help="closed-loop rounds; each cell keeps its best round (interference from "
                         "other processes only ever slows a round down)")
    ap.add_argument("--only", default="", help="comma list of sections to run (default all): "
                    "compute,transport,exported,pjrt,batching,large,front,exporter")
    ap.add_argument("--native-plugin", default="cpu", help=front_mod.NATIVE_PLUGIN_HELP)
    args = ap.parse_args(argv)
    if args.quick:
        args.duration, args.warmup, args.rounds = 1.0, 0.3, 1
    levels = [int(v) for v in args.levels.split(",")]
    only = set(filter(None, args.only.split(",")))

    def want(section: str) -> bool:
        return not only or section in only

    ts = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    work = Path(tempfile.mkdtemp(prefix="jaxport-bench-"))
    results: dict[str, Any] = {
        "timestamp": ts,
        "machine": sysinfo.machine(),
        "settings": {"duration_s": args.duration, "warmup_s": args.warmup, "levels": levels,
                     "client": "1 separate process, grpc.aio, raw-bytes ModelInfer",
                     "batch_sizes": list(BATCH_SIZES), "rounds": args.rounds,
                     "quick": args.quick, "native_plugin": args.native_plugin},
        "configs": [],
        "large": [],
        "cold_start": {},
        "exporter": {},
        "loadavg_start": os.getloadavg(),
    }
    t_start = time.monotonic()
    try:
        log(f"work dir {work}")
        memcpy = {mib: sysinfo.memcpy_bandwidth(mib * MIB) for mib in (1, 16, 64)}
        results["memcpy_mb_s"] = {str(k): v / 1e6 for k, v in memcpy.items()}
        arts = export_models(work, args.quick)
        repo: Path = arts["repo"]
        reqs, expected = mlp_requests(arts["mlp_params"], "mlp")
        breqs, bexpected = mlp_requests(arts["mlp_params"], "mlp_batched")
        ctx = multiprocessing.get_context("spawn")
        by_config: dict[str, list[list[dict[str, Any]]]] = {}
        try:  # one front for every row: this tree's source; `wire echo` for large tensors
            front, wire = front_mod.build_front(), front_mod.build_wire()
        except front_mod.BenchSetupError as exc:  # no Go: the front jaxport serve picks
            log(f"{exc}: serving with the front `jaxport serve` picks, no grpc-go echo")
            front = wire = None
            results["front_error"] = str(exc)

        def collect(name: str, rows: list[dict[str, Any]]) -> None:
            by_config.setdefault(name, []).append(rows)

        with ProcessPoolExecutor(1, mp_context=ctx) as pool:
            pool.submit(time.sleep, 0).result()  # spawn the load process before measuring

            for rnd in range(args.rounds):
                first = rnd == 0
                if args.rounds > 1:
                    log(f"round {rnd + 1} of {args.rounds}")
                if want("compute"):
                    log("compute floor (in-process)")
                    xs = [np.frombuffer(_raw_input(r), "<f4").reshape(1, models.MLP_IN)
                          for r in reqs]
                    # Both XLA CPU dispatch modes, each in a fresh process; every level keeps
                    # the better one (best_of_rounds), so the floor is the best in-process call.
                    for dispatch in ("async", "sync"):
                        with ProcessPoolExecutor(1, mp_context=ctx) as cpool:
                            rows = cpool.submit(_compute_floor_worker, str(repo / "mlp" / "1"),
                                                xs, expected, levels, args.duration,
                                                args.warmup, MLP_TOL, dispatch).result()
                        for lv in rows:
                            log(f"  {dispatch} dispatch c={lv['concurrency']}: {lv['rps']:.0f} "
                                f"req/s p50 {lv['p50_ms'] or 0:.2f} ms errors {lv['errors']}")
                        collect("compute floor", rows)

                large_names = [f"ew{m}" for m in arts["large_sizes"]]
                if want("transport"):
                    log("transport floor (the same front and workers, ModelInfer answered from "
                        "a cache)")
                    with server(floor_cmd(repo, front=front), work, "floor", ["mlp"]) as srv:
                        rows = grpc_levels(pool, srv, reqs, expected, levels, args.duration,
                                           args.warmup, MLP_TOL)
                    collect("transport floor", rows)

                for engine in ("exported", "pjrt"):
                    large_here = first and engine == "exported" and want("large")
                    if not want(engine) and not large_here:
                        continue
                    log(f"bridge --engine {engine}")
                    names = ["mlp"] + [f"ew{m}" for m in arts["large_sizes"]]
                    with server(bridge_cmd(repo, "--engine", engine, front=front), work, engine,
                                names) as srv:
                        if first:
                            results["cold_start"][
                                f"start to all models ready ({engine}), s"] = (
                                srv.ready - srv.started)
                        if want(engine):
                            rows = grpc_levels(pool, srv, reqs, expected, levels, args.duration,
                                               args.warmup, MLP_TOL)
                            collect(f"bridge {engine}", rows)
                        if large_here:
                            log("large tensors (bridge, transport floor, grpc-go echo, "
                                "shared memory, memcpy)")
                            shm_cmd = bridge_cmd(repo, "--engine", engine,
                                                 "--system-shared-memory", front=front)
                            with server(floor_cmd(repo, front=front), work, "floor-large",
                                        large_names) as fsrv, \
                                    server(shm_cmd, work, "shm-large", large_names) as ssrv, \
                                    (front_mod.wire_echo(wire) if wire else nullcontext()) as echo:
                                results["large"] = large_tensors(
                                    pool, {"bridge": srv, "floor": fsrv}, arts["large_sizes"],
                                    memcpy, 3 if args.quick else 5, shm=ssrv, echo=echo)
                        if first:
                            results["cold_start"].update(cold_start_phases(srv, engine))

                if want("batching"):
                    log("bridge with dynamic batching")
                    cmd = bridge_cmd(repo, "--engine", "exported", "--batching",
                                     "--max-queue-delay-us", "2000", front=front)
                    with server(cmd, work, "batching", ["mlp_batched"]) as srv:
                        rows = grpc_levels(pool, srv, breqs, bexpected, levels, args.duration,
                                           args.warmup, MLP_TOL)
                    collect("bridge batching", rows)

            if want("front") and front is not None and wire is not None:
                log("native front section (ghz load, batch-8 MLP, against its transport floor)")
                try:
                    results["front"] = front_mod.front_section(
                        server, pool, work, work / "front-repo", args.rounds, args.duration,
                        args.warmup, front_mod.WORKER_COUNTS, memcpy[16], log, front, wire,
                        args.native_plugin)
                except front_mod.BenchSetupError as exc:  # no ghz: the other sections stand
                    log(f"front section skipped: {exc}")
                    results["front_error"] = str(exc)

        results["configs"] = best_of_rounds(by_config)

        if want("exporter"):
            total = (256 if args.quick else 1024) * MIB
            log(f"exporter: {total / 2**30:.2f} GiB of parameters")
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as ep:
                results["exporter"] = ep.submit(_exporter_worker, str(work / "exporter"),
                                                total).result()
            log(f"  {results['exporter']}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["wall_s"] = time.monotonic() - t_start
    results["loadavg_end"] = os.getloadavg()
    results["targets"] = evaluate_targets(results)
    if results.get("front"):
        results["front_targets"] = front_mod.targets(results["front"])

    args.out.mkdir(parents=True, exist_ok=True)
    base = args.out / ts
    base.with_suffix(".json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    md = report.markdown(results)
    base.with_suffix(".md").write_text(md)
    png = base.with_suffix(".png")
    if results["configs"] and report.plot(results, png):
        log(f"plot {png}")
    # Stable names for the latest full run, so docs can link them; a quick or partial run
    # (--quick, --only) keeps only its timestamped files and never replaces them.
    if not args.quick and not only:
        for suffix in (".json", ".md", ".png"):
            src = base.with_suffix(suffix)
            if src.exists():
                shutil.copyfile(src, args.out / f"latest{suffix}")
    print(md)
    log(f"done in {results['wall_s']:.0f} s; results in {base}.{{json,md,png}}")
    return 0


def best_of_rounds(by_config: dict[str, list[list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Per configuration and concurrency level, the round with the most requests/s (all rounds'
    figures kept under `rounds`). Errors and mismatches are summed over every round."""
    configs = []
    for name, rounds in by_config.items():
        levels = []
        for cells in zip(*rounds, strict=True):
            best = dict(max(cells, key=lambda c: c["rps"]))
            best["errors"] = sum(c["errors"] for c in cells)
            best["mismatches"] = sum(c["mismatches"] for c in cells)
            best["rounds_rps"] = [c["rps"] for c in cells]
            levels.append(best)
        configs.append({"name": name, "levels": levels, "rounds": rounds})
    return configs


def _raw_input(serialized: bytes) -> bytes:
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

    return pb.ModelInferRequest.FromString(serialized).raw_input_contents[0]


def cold_start_phases(srv: Server, engine: str) -> dict[str, float]:
    """Load phases the bridge logged for model 'mlp' (checksum, deserialize, weights, ...)."""
    phases: dict[str, float] = {}
    for line in srv.log_path.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if not isinstance(rec, dict) or rec.get("model") != "mlp":
            continue
        secs = rec.get("seconds", rec.get("load_seconds"))
        if isinstance(secs, dict):
            for phase, v in secs.items():
                phases[f"mlp {engine}: {phase}, s"] = float(v)
    return phases


if __name__ == "__main__":
    sys.exit(main())
