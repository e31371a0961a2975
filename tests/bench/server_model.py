"""Thread pool or asyncio? The measurement behind the server model of grpcio's Python server
(`jaxport serve` before the native front; retired in issue 25), kept because
docs/performance.md cites its figures and `--sleep-ms` still measures what waiting costs here.

Two minimal Open Inference Protocol servers answer ModelInfer with one precomputed MLP-sized
response: grpc's synchronous server (a thread per in-flight RPC, what that server used)
and `grpc.aio` (one event loop). Nothing else differs, so what is measured is the server
model's own cost per request. The bench's closed-loop client drives each at concurrency
1, 16 and 64, alternating the two for `--rounds` rounds; the table reports req/s, p50 and
server CPU per request.

`--sleep-ms 0,2` also makes the handler sleep (no CPU) before answering: what merely waiting
as long as a computation costs gRPC and the machine (wake-ups on both sides, idle cores), which
the floors never pay and the bridge always does.

Run: `.venv/bin/python -m tests.bench.server_model [--seconds 3] [--rounds 2] [--sleep-ms 0]`.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import time
from collections.abc import Sequence
from concurrent import futures
from concurrent.futures import ProcessPoolExecutor
from multiprocessing.queues import Queue
from typing import Any

import numpy as np

from tests.bench import load as load_mod
from tests.bench import models, sysinfo

SHAPE = (1, models.MLP_OUT)


def _response() -> Any:
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

    response = pb.ModelInferResponse(model_name="mlp", model_version="1")
    response.outputs.add(name="y", datatype="FP32", shape=list(SHAPE))
    response.raw_output_contents.append(np.ones(SHAPE, "<f4").tobytes())
    return response


def _serve(kind: str, ports: Queue, sleep_s: float = 0.0) -> None:
    """Child process: serve until terminated, report the bound port on `ports`."""
    import grpc
    from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc

    response = _response()
    if kind == "thread pool":
        class Sync(pb_grpc.GRPCInferenceServiceServicer):
            def ModelInfer(self, request: Any, context: Any) -> Any:
                if sleep_s:
                    time.sleep(sleep_s)
                return response

        server = grpc.server(futures.ThreadPoolExecutor(128), maximum_concurrent_rpcs=128)
        pb_grpc.add_GRPCInferenceServiceServicer_to_server(Sync(), server)
        ports.put(server.add_insecure_port("127.0.0.1:0"))
        server.start()
        server.wait_for_termination()
        return

    class Async(pb_grpc.GRPCInferenceServiceServicer):
        async def ModelInfer(self, request: Any, context: Any) -> Any:
            if sleep_s:
                await asyncio.sleep(sleep_s)
            return response

    async def main() -> None:
        server = grpc.aio.server()
        pb_grpc.add_GRPCInferenceServiceServicer_to_server(Async(), server)
        ports.put(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        await server.wait_for_termination()

    asyncio.run(main())


def main(argv: Sequence[str] | None = None) -> int:
    """Print one row per (round, server model, concurrency)."""
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

    ap = argparse.ArgumentParser(prog="python -m tests.bench.server_model",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=3.0, help="measured seconds per level")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--levels", default="1,16,64")
    ap.add_argument("--sleep-ms", default="0",
                    help="comma list of handler sleeps before answering, in ms")
    args = ap.parse_args(argv)

    request = pb.ModelInferRequest(model_name="mlp", id="r")
    request.inputs.add(name="x", datatype="FP32", shape=[1, models.MLP_IN])
    request.raw_input_contents.append(np.zeros((1, models.MLP_IN), "<f4").tobytes())
    expected = [{"y": np.ones(SHAPE, np.float32)}]
    ctx = multiprocessing.get_context("spawn")
    print("| round | server model | handler sleep ms | conc. | req/s | p50 ms | "
          "server CPU ms/req | client CPU ms/req | errors |\n"
          "|---:|---|---:|---:|---:|---:|---:|---:|---:|", flush=True)
    with ProcessPoolExecutor(1, mp_context=ctx) as pool:
        pool.submit(time.sleep, 0).result()
        for rnd in range(1, args.rounds + 1):
            for kind, sleep_ms in ((k, float(s)) for s in args.sleep_ms.split(",")
                                   for k in ("thread pool", "asyncio")):
                ports: Queue = ctx.Queue()
                proc = ctx.Process(target=_serve, args=(kind, ports, sleep_ms / 1e3),
                                   daemon=True)
                proc.start()
                try:
                    target = f"127.0.0.1:{ports.get(timeout=60)}"
                    for conc in (int(c) for c in args.levels.split(",")):
                        spec = load_mod.LoadSpec(target, [request.SerializeToString()],
                                                 expected, conc, args.seconds, 0.5)
                        cpu0 = sysinfo.process_cpu_s(proc.pid)
                        res = pool.submit(load_mod.run_grpc_load, spec).result()
                        cpu = sysinfo.process_cpu_s(proc.pid) - cpu0
                        s, n = res.summary(), max(1, res.completed_total)
                        print(f"| {rnd} | {kind} | {sleep_ms:g} | {conc} | {s['rps']:.0f} "
                              f"| {s['p50_ms']:.3f} "
                              f"| {1e3 * cpu / n:.3f} | {1e3 * res.client_cpu_s / n:.3f} "
                              f"| {s['errors'] + s['mismatches']} |", flush=True)
                finally:
                    proc.terminate()
                    proc.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
