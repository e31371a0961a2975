#!/usr/bin/env python3
"""Throughput of the native front vs today's Python bridge, in ONE run (not a test).

    .venv/bin/python tests/front/measure.py [--levels 1,16] [--seconds 5] [--rounds 2]
    .venv/bin/python tests/front/measure.py --batching --levels 16,64   # batches: 2 workers vs 1

Serves the bench MLP (tests/bench/models.py, 512-2048-2048-512 f32, batch 1; or with
`--model tiny` the tests' 8-16-4 MLP, where compute is negligible and transport dominates) with
`jaxport serve` and with the front at 1 and 2 workers, and drives each with the bench's closed-loop
client (tests/bench/load.py: a separate process, pre-serialized requests, every response
checked against JAX). Server CPU per request sums the server process and its children (the
workers). Configurations alternate within each round; each cell keeps its best round (other
processes only ever slow a round down). Prints a table with ratios to the Python bridge.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "bridge")]

from front_helpers import build_front, front_command  # noqa: E402
from support.bridge import BridgeProcess  # noqa: E402

from tests.bench import load as load_mod  # noqa: E402
from tests.bench import models  # noqa: E402
from tests.bench.run import mlp_requests  # noqa: E402
from tests.bench.sysinfo import process_cpu_s  # noqa: E402


def tree_cpu_s(pid: int) -> float:
    """CPU seconds of `pid` and its live children (the front's workers)."""
    total = process_cpu_s(pid)
    for task in Path(f"/proc/{pid}/task").iterdir():
        for child in (task / "children").read_text().split():
            try:
                total += tree_cpu_s(int(child))
            except (FileNotFoundError, ProcessLookupError):
                pass
    return total


def tiny_model(out: Path) -> tuple[list[bytes], list[dict]]:
    """The bridge tests' 8-16-4 MLP exported to `out`; requests and JAX's answers."""
    import bridge_models as m
    import jax
    import numpy as np
    from jaxport.exporter import export
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

    params = m.mlp_params()
    export(m.mlp, params, m.MLP_INPUTS, out, output_names=["y"], goldens=1, quiet=True,
           name="mlp")
    rng = np.random.default_rng(42)
    requests, expected = [], []
    for i in range(16):
        x = rng.standard_normal((2, 8)).astype(np.float32)
        req = pb.ModelInferRequest(model_name="mlp", id=f"r{i}")
        req.inputs.add(name="x", datatype="FP32", shape=[2, 8])
        req.raw_input_contents.append(x.tobytes())
        requests.append(req.SerializeToString())
        expected.append({"y": np.asarray(jax.jit(m.mlp)(params, x))})
    return requests, expected


def measure_large(work: Path, binary: Path, sizes: list[int], rounds: int) -> int:
    """c=1 round trips of `size` MiB each way: MB/s of request payload per second of RPC."""
    import jax
    import numpy as np
    from jaxport.exporter import export
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

    cases = {}
    for mib in sizes:
        n = mib * (1 << 20) // 4
        export(models.elementwise, models.elementwise_params(),
               {"x": jax.ShapeDtypeStruct((n,), np.float32)}, work / "repo" / f"ew{mib}" / "1",
               output_names=["y"], goldens=0, quiet=True, name=f"ew{mib}")
        x = np.random.default_rng(mib).standard_normal(n).astype(np.float32)
        req = pb.ModelInferRequest(model_name=f"ew{mib}", id="large")
        req.inputs.add(name="x", datatype="FP32", shape=[n])
        req.raw_input_contents.append(x.tobytes())
        cases[mib] = (req.SerializeToString(), {"y": x * np.float32(2.0) + np.float32(0.5)})
    configs = {"python bridge": None, "front, 1 worker": front_command(binary, "--workers", "1")}
    best: dict[tuple[str, int], float] = {}
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    for rnd in range(rounds):
        for name, command in configs.items():
            with BridgeProcess(work / "repo", workdir=work / f"L{name}-{rnd}".replace(" ", "_"),
                               command=command) as server:
                for mib, (raw, expected) in cases.items():
                    out = pool.submit(load_mod.run_repeats, server.address, raw, expected, 5,
                                      1e-6, 1e-6).result()
                    if out["errors"] or out["mismatches"]:
                        print(f"  {name} {mib} MiB: {out['first_error']}")
                        continue
                    t = min(out["latencies"])
                    print(f"round {rnd} {name:16s} {mib:3d} MiB  best {t * 1e3:7.1f} ms  "
                          f"{mib * 1.048576 / t:7.0f} MB/s", flush=True)
                    best[(name, mib)] = min(best.get((name, mib), t), t)
    pool.shutdown()
    print("\n| server | MiB each way | best ms | MB/s | vs python |")
    print("|---|---|---|---|---|")
    for (name, mib), t in best.items():
        ref = best[("python bridge", mib)]
        print(f"| {name} | {mib} | {t * 1e3:.1f} | {mib * 1.048576 / t:.0f} | {ref / t:.2f}x |")
    return 0


def measure_batching(work: Path, binary: Path, levels: list[int], seconds: float,
                     warmup: float, rounds: int) -> int:
    """Dynamic batching through the front with two workers: batch-1 requests of the bench MLP
    exported with batch sizes 1..32, `--batching --max-queue-delay-us 2000`. Fill = requests
    per execution from the model's own statistics (ModelStatistics, summed over the workers);
    routed (this tree: every request of the model to one worker) vs one worker. (The first run
    also had "spread": the batching flags hidden from the front's router, so requests went to
    the worker with the fewest in flight; the workers now advertise batching in ModelConfig
    themselves, so routing cannot be bypassed: docs/front.md keeps that run's figures.)"""
    import grpc
    import jax
    import numpy as np
    from jaxport.exporter import export
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
    from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc

    params = models.mlp_params()
    export(models.mlp, params, {"x": jax.ShapeDtypeStruct((1, models.MLP_IN), np.float32)},
           work / "repo" / "mlp" / "1", output_names=["y"], goldens=1, quiet=True,
           name="mlp", batch_sizes=(1, 2, 4, 8, 16, 32))
    requests, expected = mlp_requests(params, "mlp")
    flags = ["--batching", "--max-queue-delay-us", "2000"]
    configs = {
        "routed, 2 workers": (front_command(binary, "--workers", "2"), flags),
        "front, 1 worker": (front_command(binary, "--workers", "1"), flags),
    }
    best: dict[tuple[str, int], dict] = {}
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    for rnd in range(rounds):
        for name, (command, args) in configs.items():
            with BridgeProcess(work / "repo", *args, command=command,
                               workdir=work / f"B{name}-{rnd}".replace(" ", "_")) as server:
                stub = pb_grpc.GRPCInferenceServiceStub(grpc.insecure_channel(server.address))

                def counts(stub: pb_grpc.GRPCInferenceServiceStub = stub) -> tuple[int, int]:
                    (st,) = stub.ModelStatistics(pb.ModelStatisticsRequest(name="mlp"),
                                                 timeout=60).model_stats
                    return st.inference_count, st.execution_count

                for level in levels:
                    spec = load_mod.LoadSpec(server.address, requests, expected, level,
                                             seconds, warmup, rtol=1e-4, atol=1e-4)
                    i0, e0 = counts()
                    s = pool.submit(load_mod.run_grpc_load, spec).result().summary()
                    i1, e1 = counts()
                    s["fill"] = (i1 - i0) / max(1, e1 - e0)
                    print(f"round {rnd} {name:18s} c={level:<3d} {s['rps']:8.0f} req/s  "
                          f"fill {s['fill']:5.1f} rows/execution  errors {s['errors']} "
                          f"mismatches {s['mismatches']}", flush=True)
                    key = (name, level)
                    if key not in best or s["rps"] > best[key]["rps"]:
                        best[key] = s
    pool.shutdown()
    print("\n| server (--batching) | concurrency | req/s | rows per execution |")
    print("|---|---|---|---|")
    for (name, level), s in best.items():
        print(f"| {name} | {level} | {s['rps']:.0f} | {s['fill']:.1f} |")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--levels", default="1,16")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--model", choices=("bench", "tiny"), default="bench")
    ap.add_argument("--large", default="",
                    help="instead: MiB sizes (e.g. 16,64) of an x*2+0.5 model, c=1, "
                         "request and response of that size, best of 5 sequential calls")
    ap.add_argument("--batching", action="store_true",
                    help="instead: dynamic batching through the front, two workers (routed) "
                         "vs one (rows per execution from ModelStatistics)")
    args = ap.parse_args()
    levels = [int(x) for x in args.levels.split(",")]

    import jax
    import numpy as np
    from jaxport.exporter import export

    work = Path(tempfile.mkdtemp(prefix="front-measure-"))
    binary = build_front(work)
    if args.batching:
        return measure_batching(work, binary, levels, args.seconds, args.warmup, args.rounds)
    if args.large:
        return measure_large(work, binary, [int(x) for x in args.large.split(",")],
                             args.rounds)
    if args.model == "bench":
        params = models.mlp_params()
        export(models.mlp, params, {"x": jax.ShapeDtypeStruct((1, models.MLP_IN), np.float32)},
               work / "repo" / "mlp" / "1", output_names=["y"], goldens=1, quiet=True,
               name="mlp")
        requests, expected = mlp_requests(params, "mlp")
    else:
        requests, expected = tiny_model(work / "repo" / "mlp" / "1")
    configs = {
        "python bridge": None,
        "front, 1 worker": front_command(binary, "--workers", "1"),
        "front, 2 workers": front_command(binary, "--workers", "2"),
    }
    best: dict[tuple[str, int], dict] = {}
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    for rnd in range(args.rounds):
        for name, command in configs.items():
            with BridgeProcess(work / "repo", workdir=work / f"{name}-{rnd}".replace(" ", "_"),
                               command=command) as server:
                for level in levels:
                    spec = load_mod.LoadSpec(server.address, requests, expected, level,
                                             args.seconds, args.warmup, rtol=1e-4, atol=1e-4)
                    cpu0 = tree_cpu_s(server.pid)
                    result = pool.submit(load_mod.run_grpc_load, spec).result()
                    cpu = tree_cpu_s(server.pid) - cpu0
                    s = result.summary()
                    s["server_cpu_ms_per_req"] = (cpu * 1e3 / result.completed_total
                                                  if result.completed_total else None)
                    print(f"round {rnd} {name:17s} c={level:<3d} {s['rps']:8.0f} req/s "
                          f"p50 {s['p50_ms'] or 0:6.2f} ms  server CPU "
                          f"{s['server_cpu_ms_per_req'] or 0:5.2f} ms/req  errors "
                          f"{s['errors']} mismatches {s['mismatches']}", flush=True)
                    key = (name, level)
                    if s["errors"] or s["mismatches"]:
                        print(f"  first error: {s['first_error']}")
                    if key not in best or s["rps"] > best[key]["rps"]:
                        best[key] = s
    pool.shutdown()
    print("\n| server | concurrency | req/s | vs python | p50 ms | server CPU ms/req |")
    print("|---|---|---|---|---|---|")
    for (name, level), s in best.items():
        ref = best[("python bridge", level)]["rps"]
        print(f"| {name} | {level} | {s['rps']:.0f} | {s['rps'] / ref:.2f}x | "
              f"{s['p50_ms']:.2f} | {s['server_cpu_ms_per_req']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
