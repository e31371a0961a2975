"""A complete call with the jaxport Python client: connect, read metadata, infer, read outputs.

    python basic.py HOST:PORT MODEL

Works against any Open Inference Protocol server (a jaxport bridge: `jaxport serve`). Inputs
are made up from the model's metadata (a variable dimension becomes 1), so it runs against any
model; in a real service you pass your own numpy arrays. Needs only `pip install
jaxport-client` (no JAX).
"""

from __future__ import annotations

import sys

import numpy as np
from jaxport.client import InferenceClient, InferenceServerError


def main(url: str, model: str) -> int:
    # The client owns one gRPC channel; `with` closes it. Messages up to 256 MiB by default.
    with InferenceClient(url, timeout=60) as client:
        client.wait_ready(timeout=30, model=model)

        server = client.server_metadata()
        print(f"server {server.name} {server.version}; extensions: {', '.join(server.extensions)}")

        meta = client.model_metadata(model)
        print(f"model {meta.name} versions {list(meta.versions)} platform {meta.platform}")
        for t in meta.inputs:
            print(f"  input  {t.name}: {t.datatype} {list(t.shape)}")
        for t in meta.outputs:
            print(f"  output {t.name}: {t.datatype} {list(t.shape)}")

        # One numpy array per input, in the dtype the model declares (BF16 -> ml_dtypes).
        rng = np.random.default_rng(0)
        inputs = {}
        for t in meta.inputs:
            shape = [1 if d < 0 else d for d in t.shape]
            if t.datatype == "BOOL":
                inputs[t.name] = rng.integers(0, 2, shape).astype(bool)
            else:
                inputs[t.name] = rng.integers(0, 4, shape).astype(t.dtype)

        try:
            result = client.infer(model, inputs, request_id="example-1")
        except InferenceServerError as err:
            # err.code is the gRPC status name, err.message the server's text unchanged.
            print(f"inference failed: {err.code}: {err.message}", file=sys.stderr)
            return 1

        print(f"response id {result.id} from {result.model_name} version {result.model_version}")
        for name, array in result.outputs.items():
            print(f"  {name}: {array.dtype} {list(array.shape)} first values "
                  f"{array.ravel()[:4].tolist()}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python basic.py HOST:PORT MODEL", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1], sys.argv[2]))
