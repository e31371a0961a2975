"""Scale-out benchmark (issue 33): requests/s of 2 Ray Serve replicas, each running a front,
called directly with client-side round_robin, against ONE standalone `jaxport serve`, same
model, same load generator, same run.

    .venv/bin/python tests/bench/scale_out.py [--duration 10] [--concurrency 16] [--json OUT]

The model is the bundled example MLP at batch 8 (`jaxport.exporter.examples:predict`,
x: float32[8,16]), served natively. The load generator is tests/bench/rrload (grpc-go, one
channel with round_robin over the addresses it is given, every answer checked against the
artifact's golden under rtol 1e-5). Measured, in this order:

1. `jaxport serve` alone (no Ray running), rrload on its address;
2. a 2-node Ray cluster on this machine (tests/support/ray_cluster.py: one CPU per node, a
   replica per node), rrload over the two fronts' addresses from the registry (the direct
   path: no Python per call);
3. the same cluster through Serve's gRPC proxy (one address: the convenience path), for
   reference.

Prints each level and the ratio direct/standalone (target >= 0.8). Ratios come from one run
on this machine, which other work may share (the JSON records the load average).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests"))

from support.bridge import BridgeProcess  # noqa: E402
from support.ray_cluster import running_serve_cluster  # noqa: E402

TARGET_RATIO = 0.8


def log(msg: str) -> None:
    print(f"[scale-out] {msg}", file=sys.stderr, flush=True)


def export_model(work: Path) -> tuple[Path, Path, Path]:
    """The example MLP at batch 8 as `repo/mlp/1`; its first golden's input and `probs` as raw
    float32 files for rrload."""
    import numpy as np
    from jaxport.exporter.cli import export_main

    repo = work / "repo"
    rc = export_main(["jaxport.exporter.examples:predict", "--params",
                      "jaxport.exporter.examples:init", "--input", "x:float32[8,16]",
                      "--out", str(repo / "mlp" / "1"), "--name", "mlp", "--quiet"])
    if rc:
        raise SystemExit(f"export failed ({rc})")
    artifact = repo / "mlp" / "1"
    case = json.loads((artifact / "manifest.json").read_text())["goldens"][0]
    x = np.load(artifact / case["inputs"]["x"]).astype("<f4")
    probs = np.load(artifact / case["outputs"]["probs"]).astype("<f4")
    (work / "x.f32").write_bytes(x.tobytes())
    (work / "probs.f32").write_bytes(probs.tobytes())
    return repo, work / "x.f32", work / "probs.f32"


def build_rrload(work: Path) -> Path:
    go = shutil.which("go")
    if go is None:
        raise SystemExit("scale_out.py needs Go (go on PATH) to build tests/bench/rrload")
    out = work / "rrload"
    subprocess.run([go, "build", "-o", str(out), "."], cwd=HERE / "rrload", check=True)
    return out


def rrload(binary: Path, targets: list[str], x: Path, expect: Path, concurrency: int,
           duration: float) -> dict[str, Any]:
    proc = subprocess.run(
        [str(binary), "--targets", ",".join(targets), "--model", "mlp", "--input", str(x),
         "--shape", "8,16", "--output", "probs", "--expect", str(expect),
         "--concurrency", str(concurrency), "--duration", f"{duration}s", "--warmup", "2s"],
        capture_output=True, text=True, timeout=duration + 180)
    if proc.returncode != 0:
        raise SystemExit(f"rrload failed ({proc.returncode}): {proc.stderr[-2000:]}"
                         f"{proc.stdout[-2000:]}")
    return json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per level")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--front-binary", default=None,
                        help="jaxport-front to run (default: jaxport serve's rule)")
    parser.add_argument("--pjrt-plugin", default=None, help="passed to every front")
    parser.add_argument("--json", type=Path, default=None, help="write the results here")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="jaxport-scale-out-"))
    flags: list[str] = ["--http-port", "-1"]
    app_args: dict[str, Any] = {}
    if args.pjrt_plugin:
        flags += ["--pjrt-plugin", args.pjrt_plugin]
        app_args["pjrt_plugin"] = args.pjrt_plugin
    if args.front_binary:
        flags += ["--front-binary", args.front_binary]
        app_args["front_binary"] = args.front_binary
    try:
        log("exporting the example MLP (batch 8)")
        repo, x, expect = export_model(work)
        binary = build_rrload(work)
        results: dict[str, Any] = {"concurrency": args.concurrency, "duration_s": args.duration,
                                   "loadavg_before": os.getloadavg()}
        log("standalone jaxport serve")
        with BridgeProcess(repo, *flags, workdir=work / "standalone") as server:
            results["standalone"] = rrload(binary, [server.address], x, expect,
                                           args.concurrency, args.duration)
        log("2-node Ray cluster, 2 replicas")
        with running_serve_cluster(repo, nodes=2, replicas=2, app_args=app_args) as cluster:
            results["direct"] = rrload(binary, cluster.front_addresses, x, expect,
                                       args.concurrency, args.duration)
            results["direct"]["nodes"] = sorted({f["node"] for f in cluster.fronts})
            results["proxy"] = rrload(binary, [cluster.url], x, expect, args.concurrency,
                                      args.duration)
        results["loadavg_after"] = os.getloadavg()
        ratio = results["direct"]["rps"] / results["standalone"]["rps"]
        results["ratio_direct_to_standalone"] = ratio
        results["ratio_proxy_to_standalone"] = (results["proxy"]["rps"]
                                                / results["standalone"]["rps"])
        for level in ("standalone", "direct", "proxy"):
            r = results[level]
            print(f"{level:>10}: {r['rps']:8.0f} req/s  p50 {r['p50_ms']:.2f} ms  p99 "
                  f"{r['p99_ms']:.2f} ms  errors {r['errors'] or 0}  by address {r['by_address']}")
        print(f"2 replicas direct / standalone = {ratio:.2f}x (target >= {TARGET_RATIO}x: "
              f"{'met' if ratio >= TARGET_RATIO else 'MISSED'}); through Serve's proxy "
              f"{results['ratio_proxy_to_standalone']:.2f}x")
        if args.json:
            args.json.write_text(json.dumps(results, indent=2))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
