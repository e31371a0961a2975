"""The asyncio client: many inferences in flight on one channel, then a stream.

    python async_infer.py HOST:PORT MODEL

Inputs are made up from the model's metadata (a variable dimension becomes 1), as in
basic.py. Needs only `pip install jaxport-client` (no JAX).
"""

from __future__ import annotations

import asyncio
import sys

import numpy as np
from jaxport.client import DEFAULT_RETRY_POLICY, AsyncInferenceClient, InferenceServerError


async def main(url: str, model: str) -> int:
    # retry: UNAVAILABLE (e.g. a bridge restarting) is retried with backoff by gRPC itself.
    async with AsyncInferenceClient(url, timeout=60, retry=DEFAULT_RETRY_POLICY) as client:
        await client.wait_ready(timeout=30, model=model)
        meta = await client.model_metadata(model)
        inputs = {t.name: np.ones([1 if d < 0 else d for d in t.shape], t.dtype)
                  for t in meta.inputs}
        try:
            results = await asyncio.gather(
                *(client.infer(model, inputs, request_id=f"req-{i}") for i in range(4)))
            streamed = [r async for r in client.stream_infer(model, [inputs, inputs])]
        except InferenceServerError as err:
            print(f"inference failed: {err.code}: {err.message}", file=sys.stderr)
            return 1
        print(f"{len(results)} concurrent results: {[r.id for r in results]}")
        print(f"{len(streamed)} streamed results: {[r.id for r in streamed]}")
        for name, array in results[0].outputs.items():
            print(f"  {name}: {array.dtype} {list(array.shape)}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python async_infer.py HOST:PORT MODEL", file=sys.stderr)
        sys.exit(2)
    sys.exit(asyncio.run(main(sys.argv[1], sys.argv[2])))
