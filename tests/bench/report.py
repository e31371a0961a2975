"""Benchmark results -> Markdown tables and a PNG plot (latency percentiles and throughput vs
concurrency per configuration)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _f(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _load(avg: Any) -> str:
    return "/".join(f"{v:.1f}" for v in avg) if avg else "?"


def markdown(results: dict[str, Any]) -> str:
    """All tables of one run, with the machine and the targets."""
    m = results["machine"]
    lines = [
        f"# jaxport benchmark {results['timestamp']}",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores (affinity {m['affinity']}), "
        f"{m['memory_gib']} GiB, Linux {m['kernel']}, Python {m['python']}, jax {m['jax']}, "
        f"grpcio {m['grpcio']}. Duration per level {results['settings']['duration_s']} s "
        f"(+{results['settings']['warmup_s']} s warm-up), best of "
        f"{results['settings'].get('rounds', 1)} round(s) per cell (all rounds in the JSON); "
        "client: "
        f"{results['settings']['client']}. Load average (1/5/15 min) at start "
        f"{_load(results.get('loadavg_start'))}, at end {_load(results.get('loadavg_end'))}: "
        "anything above ~0.5 means other processes shared the 2 cores during the run.",
        "",
    ]
    if results["configs"]:  # absent from a run of other sections only (--only)
        lines += [
            "## Closed loop, MLP 512-2048-2048-512 f32, batch-1 requests",
            "",
            "Every server is `jaxport serve` (the native front and its Python workers); the "
            "transport floor is the same front and workers answering ModelInfer from a cache. "
            "Server CPU is the front's process and its workers, split into the front, XLA's "
            "threads (`tf_*`: execution and its intra-op pool) and the workers' rest (Python, "
            "framing); the compute floor is one process, no front. Rows/exec = real rows per "
            "program execution (ModelStatistics), i.e. how full dynamic batches are.",
            "",
            "| configuration | conc. | req/s | p50 ms | p90 ms | p99 ms | errors | server CPU "
            "ms/req | of which front / XLA / other | client CPU ms/req | rows/exec |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]

    def ms(v: float | None) -> str:
        return _f(None if v is None else v * 1e3, 3)

    for cfg in results["configs"]:
        for lv in cfg["levels"]:
            xla, other = lv.get("server_xla_cpu_s_per_req"), lv.get("server_other_cpu_s_per_req")
            split = ("-" if xla is None or other is None else
                     f"{ms(lv.get('server_front_cpu_s_per_req'))} / {ms(xla)} / {ms(other)}")
            lines.append(
                f"| {cfg['name']} | {lv['concurrency']} | {lv['rps']:.0f} | {_f(lv['p50_ms'])} "
                f"| {_f(lv['p90_ms'])} | {_f(lv['p99_ms'])} | {lv['errors'] + lv['mismatches']} "
                f"| {ms(lv.get('server_cpu_s_per_req'))} | {split} "
                f"| {ms(lv.get('client_cpu_s_per_req'))} | {_f(lv.get('rows_per_execution'), 1)} |"
            )
    if results.get("large"):
        lines += [
            "",
            "## Large tensors (elementwise model, concurrency 1, request and response N MiB each)",
            "",
            "MB/s = request payload / median ModelInfer time (the response carries as much back).",
            "Shared memory: the same model through Triton's system-shared-memory extension "
            "(regions registered once); its time also counts the client's copy of the input "
            "into and the output out of /dev/shm. grpc-go echo: the same client against a "
            "grpc-go server answering with its input and no model (`tests/bench/wire echo`), "
            "what the front's gRPC stack itself moves here.",
            "",
            "| size | bridge MB/s | bridge p50 ms | transport floor MB/s | grpc-go echo MB/s "
            "| shared memory MB/s | shared memory p50 ms | memcpy MB/s | bridge % of memcpy "
            "| shared memory % of memcpy | errors |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in results["large"]:
            shm_pct = row.get("shm_pct_memcpy")
            lines.append(
                f"| {row['mib']} MiB | {_f(row.get('bridge_mb_s'), 0)} "
                f"| {_f(row.get('bridge_p50_ms'), 1)} | {_f(row.get('floor_mb_s'), 0)} "
                f"| {_f(row.get('grpc_go_echo_mb_s'), 0)} | {_f(row.get('shm_mb_s'), 0)} "
                f"| {_f(row.get('shm_p50_ms'), 1)} | {row['memcpy_mb_s']:.0f} "
                f"| {row['pct_memcpy']:.1f}% | {'-' if shm_pct is None else f'{shm_pct:.1f}%'} "
                f"| {row['errors']} |"
            )
    if results.get("front_error"):
        lines += ["", f"Native front section not run: {results['front_error']}"]
    if results.get("front"):
        from tests.bench.front import markdown as front_markdown

        lines += front_markdown(results["front"], results.get("front_targets") or [],
                                quick=bool(results["settings"].get("quick")))
    if results.get("cold_start"):
        lines += ["", "## Cold start (process start to model ready)", "",
                  "| phase | seconds |", "|---|---:|"]
        for phase, secs in results["cold_start"].items():
            lines.append(f"| {phase} | {secs:.3f} |")
    if results.get("exporter"):
        e = results["exporter"]
        lines += [
            "",
            "## Exporter",
            "",
            "| measure | value |",
            "|---|---:|",
        ]
        for k, v in e.items():
            lines.append(f"| {k} | {v if isinstance(v, str) else f'{v:.3f}'} |")
    if results.get("batching"):
        lines += ["", "## Batcher statistics", "", f"`{results['batching']}`"]
    if results.get("targets"):
        lines += ["", "## Targets (issue 5)", ""]
        if results["settings"].get("quick"):
            lines += ["**Quick smoke run** (`--quick`: 1 s levels, one round, 256 MiB exporter "
                      "model, where jax's own import dominates RSS): the ratios below show the "
                      "bench works, they are not measurements of the targets.", ""]
        lines += ["| target | measured | required | met |", "|---|---:|---:|---|"]
        for t in results["targets"]:
            lines.append(
                f"| {t['name']} | {t['measured']} | {t['required']} | "
                f"{'-' if t['met'] is None else 'yes' if t['met'] else '**no**'} |"
            )
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> bool:
    """Two panels: p50/p99 latency and requests/s against concurrency. False without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (ax_lat, ax_rps) = plt.subplots(1, 2, figsize=(10, 4), dpi=80)
    for cfg in results["configs"]:
        conc = [lv["concurrency"] for lv in cfg["levels"]]
        p50 = [lv["p50_ms"] or float("nan") for lv in cfg["levels"]]
        p99 = [lv["p99_ms"] or float("nan") for lv in cfg["levels"]]
        (line,) = ax_lat.plot(conc, p50, marker="o", label=f"{cfg['name']} p50")
        ax_lat.plot(conc, p99, marker="x", linestyle="--", color=line.get_color(),
                    label=f"{cfg['name']} p99")
        ax_rps.plot(conc, [lv["rps"] for lv in cfg["levels"]], marker="o", label=cfg["name"],
                    color=line.get_color())
    for ax in (ax_lat, ax_rps):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent clients")
        ax.grid(True, alpha=0.3)
    ax_lat.set_yscale("log")
    ax_lat.set_ylabel("latency ms (solid p50, dashed p99)")
    ax_rps.set_ylabel("requests/s")
    ax_rps.legend(fontsize=7)
    fig.suptitle(f"jaxport bench {results['timestamp']} (MLP, batch-1 requests)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True
