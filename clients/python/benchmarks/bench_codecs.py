"""Codec throughput: prints best-of-N times for request/response encode and decode.

    python clients/python/benchmarks/bench_codecs.py [--repeat 5]

The client's codecs (`jaxport.protocol.codecs`): building requests, decoding responses. (The
server's half is the Go front's request package: `go test -bench . ./request` in bridge/front.)

What to expect: raw decode adds no copy of its own (np.frombuffer over the bytes protobuf
materializes, which is one memcpy in upb); raw encode costs one `tobytes` copy plus
protobuf's copy into the message; typed contents go element by element through protobuf and
are orders of magnitude slower per byte, which is why raw is the default.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import numpy as np
from jaxport.protocol import codecs
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb


def best_of(repeat: int, fn: Callable[[], object]) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'case':<34}{'MiB':>8}{'ms':>10}{'GiB/s':>9}")
    for n_bytes, raw in [(1 << 10, True), (1 << 20, True), (64 << 20, True),
                         (1 << 10, False), (1 << 20, False)]:
        x = np.random.default_rng(0).standard_normal(n_bytes // 4).astype(np.float32)
        mib = n_bytes / (1 << 20)
        kind = "raw" if raw else "typed"
        request = codecs.build_infer_request("m", {"x": x}, raw=raw)
        wire = request.SerializeToString()

        def parse(wire: bytes = wire) -> pb.ModelInferRequest:
            message = pb.ModelInferRequest()
            message.ParseFromString(wire)
            return message

        response = pb.ModelInferResponse(model_name="m")
        response.outputs.add(name="y", datatype="FP32", shape=list(x.shape))
        response.raw_output_contents.append(x.tobytes())
        cases = {
            f"build_infer_request ({kind})": lambda x=x, raw=raw: codecs.build_infer_request(
                "m", {"x": x}, raw=raw),
            f"protobuf parse ({kind})": parse,
        }
        if raw:
            cases["decode_infer_response (raw)"] = lambda r=response: (
                codecs.decode_infer_response(r))
        for label, fn in cases.items():
            seconds = best_of(args.repeat, fn)
            rate = n_bytes / seconds / (1 << 30) if seconds else float("inf")
            print(f"{label:<34}{mib:>8.3f}{seconds * 1e3:>10.3f}{rate:>9.2f}")


if __name__ == "__main__":
    main()
