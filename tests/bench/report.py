"""The report of a `make bench` run: markdown tables (every figure beside the grpc-go echo
server and the Python workers of the same run) and a plot (jaxport beside Triton, the echo
floor and the workers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROWS = ("echo", "native", "native batching", "workers", "workers batching", "triton")
LABELS = {"echo": "grpc-go echo (no model)", "native": "jaxport native",
          "native batching": "jaxport native, batching", "workers": "jaxport workers (Python)",
          "workers batching": "jaxport workers, batching",
          "triton": "Triton 2.51 (python, jax.jit)"}
CASES = {
    "mlp8": "MLP 64-256-16 f32, 8-row requests (batch 8)",
    "mlp1": "MLP 64-256-16 f32, 1-row requests (batching: exported at 1..64)",
    "big1": "compute-bound MLP 1024-4096-1024 f32 (33 MB of weights), 1-row requests",
}


def _f(v: float | None, d: int = 2) -> str:
    return "-" if v is None else f"{v:.{d}f}"


def _x(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def markdown(results: dict[str, Any]) -> str:
    m = results["machine"]
    s = results["settings"]
    la0, la1 = results["loadavg_start"], results["loadavg_end"]
    lines = [
        f"# jaxport benchmark {results['timestamp']}", "",
        f"Commit {results.get('commit', '?')}. Machine: {m['cpu']}, {m['cores']} cores "
        f"(affinity {m['affinity']}), {m['memory_gib']} GiB, Linux {m['kernel']}, Python "
        f"{m['python']}, jax {m['jax']}. {s['duration_s']:g} s per cell (+{s['warmup_s']:g} s "
        f"warm-up), best of {s['rounds']} round(s) (every round in the JSON); "
        f"{results['wall_s']:.0f} s in all. Load average (1/5/15 min) at start "
        f"{la0[0]:.1f}/{la0[1]:.1f}/{la0[2]:.1f}, at end {la1[0]:.1f}/{la1[1]:.1f}/{la1[2]:.1f} "
        "on these cores: anything above ~1 means other processes shared them; only ratios "
        "within this run mean anything.", ""]
    if s.get("quick"):
        lines += ["**Quick smoke run** (`--quick`): the figures show the harness works; they "
                  "measure nothing.", ""]
    for name, err in (results.get("errors") or {}).items():
        lines.append(f"- **{name} did not run**: {err}")
    if results.get("errors"):
        lines.append("")
    serving = results.get("serving")
    if serving:
        lines += [f"Load: ghz {serving['ghz']}, closed loop, one connection, the same "
                  "pre-serialized request per cell; every server's answer checked against JAX "
                  "first. Server CPU = utime + stime of the server's process and its children "
                  "(workers, Triton's stub) per completed request. Batching: "
                  f"`--batching-models <model>:{serving['batch_delay_us']}` (the front's "
                  "batcher, for native and worker-served models alike).", ""]
        for case, title in CASES.items():
            rows = serving["cells"].get(case)
            if not rows:
                continue
            echo, workers = rows.get("echo", {}), rows.get("workers", {})
            lines += [f"## {title}", "",
                      "| server | c | req/s | vs echo | vs workers | p50 ms | vs echo | p99 ms "
                      "| server CPU ms/req | vs echo | errors | rounds req/s |",
                      "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
            for row in ROWS:
                for c, r in sorted((rows.get(row) or {}).items(), key=lambda kv: int(kv[0])):
                    e, w = echo.get(c) or {}, workers.get(c) or {}
                    lines.append(
                        f"| {LABELS[row]} | {c} | {r['rps']:.0f} | {_x(r['rps'], e.get('rps'))} "
                        f"| {_x(r['rps'], w.get('rps'))} | {_f(r['p50_ms'])} "
                        f"| {_x(r['p50_ms'], e.get('p50_ms'))} | {_f(r['p99_ms'])} "
                        f"| {_f(r['cpu_ms_per_req'], 3)} "
                        f"| {_x(r['cpu_ms_per_req'], e.get('cpu_ms_per_req'))} | {r['errors']} "
                        f"| {' '.join(f'{v:.0f}' for v in r.get('rounds_rps', []))} |")
            lines.append("")
        stats = serving.get("native_batch_stats") or {}
        if stats:
            lines += ["Native batching over the whole run (ModelStatistics): "
                      + "; ".join(f"`{k}` {_f(v.get('rows_per_execution'))} real rows per "
                                  f"execution, executions by size {v.get('batch_sizes')}"
                                  for k, v in stats.items()), ""]
    load = results.get("load")
    if load:
        line = load.get("load_line") or {}
        lines += ["## Loading a 1 GiB artifact (4 x 8192x8192 f32, every checksum verified)", "",
                  f"The front's load line: {_f(load.get('gib_per_s'))} GiB/s of weights, load "
                  f"{_f(load.get('load_seconds'))} s ({line.get('weight_bytes', '?')} weight "
                  f"bytes), start to ready {_f(load['start_to_ready_s'])} s; peak RSS "
                  f"{load['peak_rss_bytes'] / 2**30:.2f} GiB = "
                  f"{load['peak_rss_over_weights']:.2f}x the weights, RSS once ready "
                  f"{load['rss_bytes'] / 2**30:.2f} GiB. Floors in this run: the chunk files "
                  f"read from the page cache at {load['read_gib_per_s']:.2f} GiB/s (one "
                  f"thread), sha256 at {load['sha256_gib_per_s_one_core']:.2f} GiB/s on one "
                  f"core ({load['cores']} cores).", ""]
    fp = results.get("footprint")
    if fp:
        lines += ["## Footprint (issue 33): the demo model under `jaxport serve`, default flags",
                  "", f"Start to ready {fp['start_to_ready_s']:.2f} s; RSS of the process tree "
                  f"{fp['tree_rss_bytes'] / 1e6:.0f} MB; processes: "
                  + "; ".join(f"`{p[:80]}`" for p in fp["processes"]) + "; Python processes: "
                  f"{len(fp['python_processes'])}.", ""]
    if results.get("large"):
        lines += ["## 16 MiB each way (elementwise model, c=1, the jaxport Go client)", "",
                  "| server | median ms | MB/s | % of memcpy |", "|---|---:|---:|---:|"]
        for r in results["large"]:
            lines.append(f"| {r['server']} | {r['median_ms']:.1f} | {r['mb_s']:.0f} "
                         f"| {r['pct_memcpy']:.2f}% |")
        lines.append("")
    so = results.get("scale-out")
    if so:
        lines += ["## Scale-out (issue 33, tests/bench/scale_out.py)", "",
                  f"c={so['concurrency']}: one jaxport serve {so['standalone']['rps']:.0f} "
                  f"req/s; 2 Ray replicas reached directly {so['direct']['rps']:.0f} req/s "
                  f"({so['ratio_direct_to_standalone']:.2f}x); through Serve's proxy "
                  f"{so['proxy']['rps']:.0f} req/s.", ""]
    ex = results.get("exporter")
    if ex:
        lines += ["## Exporter (1 GiB of parameters)", "",
                  ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}"
                            for k, v in ex.items()), ""]
    lines += ["## Targets", "", "| issue | target | measured | required | met |",
              "|---|---|---:|---:|---|"]
    for t in results["targets"]:
        met = "-" if t["met"] is None else "met" if t["met"] else "**missed**"
        issue = "" if not t["issue"] else str(t["issue"])
        lines.append(f"| {issue} | {t['name']} | {_f(t['measured'], 3)} | {t['required']} "
                     f"| {met} |")
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], path: Path) -> bool:
    """jaxport beside Triton, the echo floor and the workers: req/s, p50 and server CPU per
    request of the batch-8 MLP, and batching on both 1-row cases. False when nothing to plot."""
    cells = (results.get("serving") or {}).get("cells")
    if not cells:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = {"echo": "#999999", "native": "#1f77b4", "native batching": "#6baed6",
              "workers": "#ff7f0e", "workers batching": "#fdae6b", "triton": "#2ca02c"}
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    mlp8 = cells.get("mlp8", {})
    panels = [(axes[0][0], "mlp8: req/s", "rps", mlp8, ["1", "16", "64"]),
              (axes[0][1], "mlp8: p50 ms (c=1) and server CPU ms/request (c=16)", None, mlp8,
               None)]
    for ax, title, key, rows, levels in panels:
        present = [r for r in ROWS if r in rows]
        if key:
            width = 0.8 / max(len(present), 1)
            for i, row in enumerate(present):
                vals = [(rows[row].get(c) or rows[row].get(int(c)) or {}).get(key) or 0
                        for c in levels]
                ax.bar([j + i * width for j in range(len(levels))], vals, width,
                       label=LABELS[row], color=colors[row])
            ax.set_xticks([j + width * (len(present) - 1) / 2 for j in range(len(levels))],
                          [f"c={c}" for c in levels])
        else:
            width = 0.8 / max(len(present), 1)
            for i, row in enumerate(present):
                c1 = rows[row].get("1") or rows[row].get(1) or {}
                c16 = rows[row].get("16") or rows[row].get(16) or {}
                ax.bar([i * width, 1 + i * width],
                       [c1.get("p50_ms") or 0, c16.get("cpu_ms_per_req") or 0], width,
                       label=LABELS[row], color=colors[row])
            ax.set_xticks([width * (len(present) - 1) / 2, 1 + width * (len(present) - 1) / 2],
                          ["p50 ms, c=1", "CPU ms/request, c=16"])
        ax.set_title(title)
        ax.legend(fontsize=7)
    for ax, case in ((axes[1][0], "mlp1"), (axes[1][1], "big1")):
        rows = cells.get(case, {})
        present = [r for r in ROWS if r in rows]
        vals = [(rows[r].get("64") or rows[r].get(64) or {}).get("rps") or 0 for r in present]
        ax.bar(range(len(present)), vals, color=[colors[r] for r in present])
        ax.set_xticks(range(len(present)), [LABELS[r].replace(" (", "\n(").replace(", ", ",\n")
                                            for r in present], fontsize=7)
        ax.set_title(f"{case}: req/s at c=64 (1-row requests)")
    fig.suptitle(f"jaxport bench {results['timestamp']} (one run; load average "
                 f"{results['loadavg_start'][0]:.1f} at start)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return True
