"""Triton's own clients against a jaxport image's running container (test_images.py runs this).

MUST run in its own venv's process (test_images.py makes it: tritonclient[http,grpc]; its
protobuf symbols clash with jaxport's generated stubs in one process). For every model and
golden case in WORK/cases.json (+ cases.npz, written by the test from the artifacts): infer
over gRPC (tritonclient.grpc) and over REST (tritonclient.http, binary tensors), and read each
model's config (engine, max_batch_size, dynamic_batching) over gRPC. Writes WORK/outputs.npz
(`<transport>/<model>/<case>/<output>`) and WORK/result.json; the test compares the outputs with
the goldens under the artifact format's tolerance. Prints DONE last.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import np_to_triton_dtype


def infer(client, module, model: str, inputs: dict[str, np.ndarray],
          outputs: list[str], **kw) -> dict[str, np.ndarray]:
    request = []
    for name, value in inputs.items():
        tensor = module.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
        tensor.set_data_from_numpy(value, **kw)
        request.append(tensor)
    wanted = [module.InferRequestedOutput(n, **kw) for n in outputs]
    result = client.infer(model, request, outputs=wanted)
    return {n: result.as_numpy(n) for n in outputs}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--grpc", required=True)
    parser.add_argument("--http", required=True)
    parser.add_argument("--work", type=Path, required=True)
    args = parser.parse_args()
    cases = json.loads((args.work / "cases.json").read_text())
    arrays = dict(np.load(args.work / "cases.npz"))
    grpc = grpcclient.InferenceServerClient(args.grpc)
    http = httpclient.InferenceServerClient(args.http)
    got: dict[str, np.ndarray] = {}
    result: dict[str, object] = {"server_ready": [grpc.is_server_ready(),
                                                  http.is_server_ready()]}
    for model, model_cases in cases.items():
        config = grpc.get_model_config(model, as_json=True)["config"]
        result[model] = {
            "engine": config.get("parameters", {}).get("engine", {}).get("string_value"),
            "max_batch_size": config.get("max_batch_size", 0),
            "dynamic_batching": "dynamic_batching" in config,
            "ready": [grpc.is_model_ready(model), http.is_model_ready(model)],
        }
        for case, spec in model_cases.items():
            inputs = {n: arrays[f"{model}/{case}/in/{n}"] for n in spec["inputs"]}
            for transport, client, module, kw in (("grpc", grpc, grpcclient, {}),
                                                  ("http", http, httpclient,
                                                   {"binary_data": True})):
                for name, value in infer(client, module, model, inputs, spec["outputs"],
                                         **kw).items():
                    got[f"{transport}/{model}/{case}/{name}"] = value
    np.savez(args.work / "outputs.npz", **got)
    (args.work / "result.json").write_text(json.dumps(result))
    print("DONE")


if __name__ == "__main__":
    main()
