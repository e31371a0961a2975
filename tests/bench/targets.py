"""Every target of issues 36 and 33 that `make bench` measures, as ratios of ONE run (figures
from different runs are never compared): each one's measured value, requirement and met or
missed; a target whose section did not run is listed with no figure. Diagnostics (no
requirement) say where a figure stands against the floors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.bench import exporter


def evaluate(results: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    cells = (results.get("serving") or {}).get("cells") or {}

    def cell(case: str, row: str, c: int) -> dict[str, Any] | None:
        return cells.get(case, {}).get(row, {}).get(c)

    def ratio(a: tuple[str, str, int], b: tuple[str, str, int], key: str) -> float | None:
        x, y = cell(*a), cell(*b)
        if not x or not y or not x.get(key) or not y.get(key):
            return None
        return x[key] / y[key]

    def add(issue: int, name: str, value: float | None, required: str,
            ok: Callable[[float], bool] | None) -> None:
        out.append({"issue": issue, "name": name,
                    "measured": None if value is None else float(value), "required": required,
                    "met": None if value is None or ok is None else bool(ok(value))})

    def at_least(x: float) -> Callable[[float], bool]:
        return lambda v: v >= x

    def at_most(x: float) -> Callable[[float], bool]:
        return lambda v: v <= x

    n16, e16 = ("mlp8", "native", 16), ("mlp8", "echo", 16)
    n1, e1 = ("mlp8", "native", 1), ("mlp8", "echo", 1)
    t16, t1 = ("mlp8", "triton", 16), ("mlp8", "triton", 1)
    add(36, "MLP 64-256-16 (batch 8), c=16 req/s: native / grpc-go echo",
        ratio(n16, e16, "rps"), ">= 0.60", at_least(0.6))
    add(36, "MLP 64-256-16, c=16 server CPU per request: native / grpc-go echo",
        ratio(n16, e16, "cpu_ms_per_req"), "<= 2.50", at_most(2.5))
    add(36, "MLP 64-256-16, c=1 p50: native / grpc-go echo", ratio(n1, e1, "p50_ms"),
        "<= 1.30", at_most(1.3))
    add(36, "MLP 64-256-16, c=16 req/s: native / Triton 2.51 (python backend, jax.jit)",
        ratio(n16, t16, "rps"), ">= 4.00", at_least(4))
    add(36, "MLP 64-256-16, c=1 p50: native / Triton", ratio(n1, t1, "p50_ms"), "<= 0.40",
        at_most(0.4))
    add(36, "MLP 64-256-16, c=16 server CPU per request: native / Triton",
        ratio(n16, t16, "cpu_ms_per_req"), "<= 0.25", at_most(0.25))
    for case, label, need in (("mlp1", "MLP 64-256-16, 1-row requests", 2.5),
                              ("big1", "MLP 1024-4096-1024, 1-row requests", 6.0)):
        add(36, f"{label}, c=64 req/s: native batching / native unbatched",
            ratio((case, "native batching", 64), (case, "native", 64), "rps"),
            f">= {need:.2f}", at_least(need))
        add(36, f"{label}, c=1 p50: native batching / native unbatched",
            ratio((case, "native batching", 1), (case, "native", 1), "p50_ms"), "<= 1.25",
            at_most(1.25))
    load = results.get("load") or {}
    add(36, "1 GiB artifact opened, every checksum verified: GiB/s of weights",
        load.get("gib_per_s"), ">= 1.00", at_least(1.0))
    add(36, "1 GiB artifact: peak RSS of the front / weight bytes",
        load.get("peak_rss_over_weights"), "<= 1.20", at_most(1.2))

    fp = results.get("footprint") or {}
    add(33, "demo model, default flags: RSS of the server's process tree, MB",
        fp.get("tree_rss_bytes") and fp["tree_rss_bytes"] / 1e6, "<= 200", at_most(200))
    add(33, "demo model: start to ready, s", fp.get("start_to_ready_s"), "<= 1.5", at_most(1.5))
    add(33, "demo model: Python processes in the tree once ready",
        None if not fp else len(fp.get("python_processes", [])), "0", at_most(0))
    add(33, "1 GiB MLP: RSS of the server's process tree once ready, GB",
        load.get("tree_rss_bytes") and load["tree_rss_bytes"] / 1e9, "<= 1.30", at_most(1.3))
    so = results.get("scale-out") or {}
    add(33, "2 Ray replicas reached directly / one jaxport serve, c=16 req/s",
        so.get("ratio_direct_to_standalone"), ">= 0.80", at_least(0.8))
    for name, value, required, met in exporter.targets(results.get("exporter") or {}):
        out.append({"issue": 5, "name": name, "measured": value, "required": required,
                    "met": met})

    def diag(name: str, value: float | None) -> None:
        add(0, f"(diagnostic) {name}", value, "-", None)

    diag("MLP 64-256-16, c=64 req/s: native / grpc-go echo",
         ratio(("mlp8", "native", 64), ("mlp8", "echo", 64), "rps"))
    diag("MLP 64-256-16, c=16 req/s: native / workers", ratio(n16, ("mlp8", "workers", 16),
                                                             "rps"))
    diag("MLP 64-256-16, c=1 p50: native / workers", ratio(n1, ("mlp8", "workers", 1), "p50_ms"))
    diag("MLP 64-256-16, c=16 req/s: Triton / grpc-go echo", ratio(t16, e16, "rps"))
    for case in ("mlp1", "big1"):
        diag(f"{case} c=64 req/s: native batching / grpc-go echo",
             ratio((case, "native batching", 64), (case, "echo", 64), "rps"))
        diag(f"{case} c=64 req/s: workers batching / workers unbatched",
             ratio((case, "workers batching", 64), (case, "workers", 64), "rps"))
    stats = (results.get("serving") or {}).get("native_batch_stats") or {}
    for model, st in stats.items():
        diag(f"{model}: real rows per execution over the run (ModelStatistics)",
             st.get("rows_per_execution"))
    if load:
        diag("1 GiB load floor: chunk files read from the page cache, GiB/s",
             load.get("read_gib_per_s"))
        diag("1 GiB load floor: sha256 on one core, GiB/s", load.get("sha256_gib_per_s_one_core"))
    for r in results.get("large") or []:
        diag(f"16 MiB each way, Go client, {r['server']}: % of memcpy", r["pct_memcpy"])
    return out
