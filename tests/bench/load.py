"""Closed-loop load generation: N callers, each sending its next request when the last answered.

Runs in a separate process (spawned by the driver) so the client's Python does not share a GIL
with the server or the driver; its own CPU seconds are reported next to the server's. gRPC
calls go through a raw-bytes method (the request is serialized once up front), and every
response is parsed and compared numerically with the expected output.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"


@dataclass
class LoadSpec:
    """One measured level: where, what, how many concurrent callers, how long."""

    target: str  # "host:port"
    requests: list[bytes]  # serialized ModelInferRequests, used round-robin
    expected: list[dict[str, np.ndarray]]  # per request: output name -> expected array
    concurrency: int
    duration_s: float
    warmup_s: float = 0.5
    rtol: float = 1e-5
    atol: float = 1e-5
    max_message_bytes: int = 256 * 1024 * 1024


@dataclass
class LoadResult:
    """What one level measured (latencies in seconds, sorted)."""

    concurrency: int
    duration_s: float
    latencies: list[float] = field(default_factory=list)
    errors: int = 0
    mismatches: int = 0
    first_error: str = ""
    client_cpu_s: float = 0.0
    bytes_sent: int = 0
    completed_total: int = 0  # warm-up included: divides whole-run CPU deltas

    def summary(self) -> dict[str, Any]:
        """rps, p50/p90/p99 (ms), errors, client CPU per request."""
        lat = np.sort(np.asarray(self.latencies)) if self.latencies else np.zeros(0)
        ok = len(lat)

        def pct(q: float) -> float | None:
            return float(np.percentile(lat, q) * 1e3) if ok else None

        return {
            "concurrency": self.concurrency,
            "requests": ok,
            "rps": ok / self.duration_s if self.duration_s else 0.0,
            "p50_ms": pct(50),
            "p90_ms": pct(90),
            "p99_ms": pct(99),
            "errors": self.errors,
            "mismatches": self.mismatches,
            "first_error": self.first_error,
            "client_cpu_s_per_req": self.client_cpu_s / ok if ok else None,
            "bytes_per_s": self.bytes_sent / self.duration_s if self.duration_s else 0.0,
        }


def check_response(raw: bytes, expected: dict[str, np.ndarray], rtol: float, atol: float) -> str:
    """'' if the serialized ModelInferResponse holds the expected outputs, else what differs."""
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

    resp = pb.ModelInferResponse.FromString(raw)
    if len(resp.raw_output_contents) != len(resp.outputs):
        return f"{len(resp.outputs)} outputs but {len(resp.raw_output_contents)} raw contents"
    got = {}
    for spec, data in zip(resp.outputs, resp.raw_output_contents, strict=True):
        exp = expected.get(spec.name)
        if exp is None:
            continue
        arr = np.frombuffer(data, dtype=exp.dtype.newbyteorder("<"))
        if arr.size != exp.size:
            return f"output {spec.name!r}: {arr.size} elements, expected {exp.size}"
        got[spec.name] = arr.reshape(exp.shape)
    for name, exp in expected.items():
        if name not in got:
            return f"output {name!r} missing"
        if not np.allclose(got[name], exp, rtol=rtol, atol=atol):
            err = float(np.max(np.abs(got[name].astype(np.float64) - exp)))
            return f"output {name!r} differs (max abs err {err:.3g})"
    return ""


async def _run_async(spec: LoadSpec) -> LoadResult:
    import grpc

    opts = [
        ("grpc.max_receive_message_length", spec.max_message_bytes),
        ("grpc.max_send_message_length", spec.max_message_bytes),
    ]
    result = LoadResult(spec.concurrency, spec.duration_s)
    n_req = len(spec.requests)
    completed = 0
    async with grpc.aio.insecure_channel(spec.target, options=opts) as channel:
        call = channel.unary_unary(MODEL_INFER)  # bytes in, bytes out
        cpu0 = time.process_time()
        t_start = time.perf_counter()
        t_measure = t_start + spec.warmup_s
        t_end = t_measure + spec.duration_s

        async def caller(worker: int) -> None:
            nonlocal completed
            i = worker
            while True:
                t0 = time.perf_counter()
                if t0 >= t_end:
                    return
                k = i % n_req
                i += spec.concurrency
                try:
                    raw = await call(spec.requests[k], timeout=60)
                except grpc.aio.AioRpcError as exc:
                    if t0 >= t_measure:
                        result.errors += 1
                        result.first_error = result.first_error or (
                            f"{exc.code().name}: {exc.details()}"
                        )
                    continue
                t1 = time.perf_counter()
                completed += 1
                bad = check_response(raw, spec.expected[k], spec.rtol, spec.atol)
                if bad:  # counted even outside the window: a wrong answer is never acceptable
                    result.mismatches += 1
                    result.first_error = result.first_error or bad
                    continue
                if t0 >= t_measure and t1 <= t_end:
                    result.latencies.append(t1 - t0)
                    result.bytes_sent += len(spec.requests[k])

        await asyncio.gather(*(caller(w) for w in range(spec.concurrency)))
        # Client CPU over the whole run (warm-up included) per completed call.
        result.completed_total = completed
        result.client_cpu_s = (time.process_time() - cpu0) * len(result.latencies) / max(
            completed, 1
        )
    return result


def _client_heap() -> None:
    """The client process keeps its heap like the bridge does (large responses otherwise pay
    first-touch page faults here too, which would be charged to the bridge's latency)."""
    from jaxport.bridge.core import keep_heap_memory

    keep_heap_memory()


def run_grpc_load(spec: LoadSpec) -> LoadResult:
    """Entry point for a spawned process: closed loop over gRPC (asyncio, one thread)."""
    _client_heap()
    return asyncio.run(_run_async(spec))


def run_inprocess_load(
    call: Callable[[int], None], concurrency: int, duration_s: float, warmup_s: float = 0.5
) -> LoadResult:
    """Closed loop with `concurrency` threads calling `call(k)` (k = request index).

    `call` must check its own result and raise on a mismatch; raising counts as an error.
    """
    import threading

    result = LoadResult(concurrency, duration_s)
    lock = threading.Lock()
    t_start = time.perf_counter()
    t_measure = t_start + warmup_s
    t_end = t_measure + duration_s

    def worker(w: int) -> None:
        lat: list[float] = []
        errors = 0
        done = 0
        first = ""
        i = w
        while True:
            t0 = time.perf_counter()
            if t0 >= t_end:
                break
            try:
                call(i)
            except Exception as exc:
                if t0 >= t_measure:
                    errors += 1
                    first = first or repr(exc)
                i += concurrency
                continue
            t1 = time.perf_counter()
            done += 1
            if t0 >= t_measure and t1 <= t_end:
                lat.append(t1 - t0)
            i += concurrency
        with lock:
            result.completed_total += done
            result.latencies.extend(lat)
            result.errors += errors
            result.first_error = result.first_error or first

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return result


def run_repeats(target: str, request: bytes, expected: dict[str, np.ndarray], repeats: int,
                rtol: float, atol: float, max_message_bytes: int = 256 * 1024 * 1024
                ) -> dict[str, Any]:
    """One warm-up call then `repeats` sequential ModelInfer calls (sync client); every answer
    checked.

    For large tensors: a fixed count instead of a time window, since one call may take longer
    than a window.
    """
    import grpc

    _client_heap()
    opts = [("grpc.max_receive_message_length", max_message_bytes),
            ("grpc.max_send_message_length", max_message_bytes)]
    out: dict[str, Any] = {"latencies": [], "errors": 0, "mismatches": 0, "first_error": ""}
    with grpc.insecure_channel(target, options=opts) as channel:
        call = channel.unary_unary(MODEL_INFER)
        for i in range(repeats + 1):
            t0 = time.perf_counter()
            try:
                raw = call(request, timeout=300)
            except grpc.RpcError as exc:
                out["errors"] += 1
                out["first_error"] = out["first_error"] or f"{exc.code().name}: {exc.details()}"
                continue
            dt = time.perf_counter() - t0
            bad = check_response(raw, expected, rtol, atol)
            if bad:
                out["mismatches"] += 1
                out["first_error"] = out["first_error"] or bad
            elif i:
                out["latencies"].append(dt)
    return out

