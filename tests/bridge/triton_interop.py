"""Interop check with the Triton Python client (`tritonclient[grpc]`), a client nobody here wrote.

MUST run in its own process: tritonclient ships its own generated `inference.*` protobuf
messages, which clash with ours in one process. Reads expected values from the artifacts'
manifest.json and goldens with plain json/numpy (no jaxport import), prints `PASS <check>` per
check and exits 1 on the first mismatch (`FAIL <check>: why`).

    python triton_interop.py --url 127.0.0.1:PORT --repository REPO
"""

from __future__ import annotations

import argparse
import json
import queue
import sys
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

BF16_TOL = 2.0**-7  # one bf16 ulp (8-bit significand); see tests/bridge/test_bridge_infer.py


class Mismatch(Exception):
    """A check failed."""


def check(cond: bool, name: str, why: str = "") -> None:
    if not cond:
        raise Mismatch(f"{name}: {why}")
    print(f"PASS {name}", flush=True)


def load_npy(path: Path, datatype: str) -> np.ndarray:
    array = np.load(path, allow_pickle=False)
    if datatype == "BF16":  # numpy has no bf16: stored as 2-byte void
        array = array.view(ml_dtypes.bfloat16)
    return array


def goldens(artifact: Path) -> tuple[dict[str, Any], list[tuple[str, dict, dict]]]:
    manifest = json.loads((artifact / "manifest.json").read_text())
    kinds = {t["name"]: t["dtype"]["datatype"]
             for t in manifest["inputs"] + manifest["outputs"]}
    cases = []
    for case in manifest.get("goldens", []):
        ins = {k: load_npy(artifact / v, kinds[k]) for k, v in case["inputs"].items()}
        outs = {k: load_npy(artifact / v, kinds[k]) for k, v in case["outputs"].items()}
        cases.append((case["name"], ins, outs))
    return kinds, cases


def to_triton_input(name: str, array: np.ndarray, datatype: str) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), datatype)
    # tritonclient takes BF16 as float32 and keeps the high 2 bytes: exact for bf16 values.
    tensor.set_data_from_numpy(array.astype(np.float32) if datatype == "BF16" else array)
    return tensor


def compare(got: np.ndarray, want: np.ndarray, datatype: str, what: str) -> None:
    if datatype == "BF16":  # tritonclient returns BF16 outputs as float32
        ok = got.shape == want.shape and np.allclose(
            got, want.astype(np.float32), rtol=BF16_TOL, atol=BF16_TOL)
    elif datatype in ("FP32", "FP64", "FP16"):
        ok = got.dtype == want.dtype and got.shape == want.shape and np.allclose(
            got, want, rtol=1e-6, atol=1e-6)
    else:
        ok = got.dtype == want.dtype and np.array_equal(got, want)
    check(ok, what, f"got {got!r}, want {want!r}")


def infer_goldens(client: grpcclient.InferenceServerClient, model: str, artifact: Path) -> None:
    kinds, cases = goldens(artifact)
    check(bool(cases), f"{model}: has goldens")
    for case, ins, outs in cases:
        result = client.infer(
            model,
            [to_triton_input(k, v, kinds[k]) for k, v in ins.items()],
            outputs=[grpcclient.InferRequestedOutput(k) for k in outs],
            request_id=f"{model}-{case}",
        )
        check(result.get_response().id == f"{model}-{case}", f"{model}/{case}: id echoed")
        for name, want in outs.items():
            compare(result.as_numpy(name), want, kinds[name], f"{model}/{case}/{name}")


def run(url: str, repository: Path) -> None:
    client = grpcclient.InferenceServerClient(url=url)
    check(client.is_server_live(), "is_server_live")
    check(client.is_server_ready(), "is_server_ready")
    for model in ("mlp", "mixed"):
        check(client.is_model_ready(model), f"is_model_ready({model})")

    meta = client.get_model_metadata("mixed")
    check([(t.name, t.datatype, list(t.shape)) for t in meta.inputs]
          == [("a", "BF16", [3, 4]), ("idx", "INT64", [3]), ("flag", "BOOL", [3])],
          "get_model_metadata(mixed) inputs", str(meta))
    check([t.datatype for t in meta.outputs] == ["BF16", "INT64", "BOOL"],
          "get_model_metadata(mixed) outputs", str(meta))
    config = client.get_model_config("mixed").config
    check([i.data_type for i in config.input] == [model_config_pb2.TYPE_BF16,
                                                  model_config_pb2.TYPE_INT64,
                                                  model_config_pb2.TYPE_BOOL]
          and config.max_batch_size == 0, "get_model_config(mixed)", str(config))

    infer_goldens(client, "mlp", repository / "mlp" / "1")      # FP32
    infer_goldens(client, "mixed", repository / "mixed" / "1")  # BF16, INT64, BOOL

    try:
        client.infer("mlp", [to_triton_input("x", np.ones((3, 8), np.float32), "FP32")])
        raise Mismatch("infer with a wrong shape succeeded")
    except InferenceServerException as exc:
        check("INVALID_ARGUMENT" in str(exc.status()) and "input 'x'" in exc.message(),
              "wrong shape -> INVALID_ARGUMENT naming the input", str(exc))

    index = {(m.name, m.version): m.state
             for m in client.get_model_repository_index().models}
    check(index.get(("mlp", "1")) == "READY" and index.get(("mixed", "1")) == "READY",
          "get_model_repository_index", str(index))

    client.unload_model("mlp")
    check(not client.is_model_ready("mlp"), "unload_model(mlp)")
    client.load_model("mlp")
    check(client.is_model_ready("mlp"), "load_model(mlp)")
    infer_goldens(client, "mlp", repository / "mlp" / "1")

    stats = client.get_inference_statistics("mlp").model_stats
    check(len(stats) == 1 and stats[0].inference_stats.success.count >= 1,
          "get_inference_statistics(mlp)", str(stats))

    # Streaming: two good requests around a bad one; errors arrive through the callback.
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    _, cases = goldens(repository / "mlp" / "1")
    good = [to_triton_input("x", cases[0][1]["x"], "FP32")]
    bad = [to_triton_input("x", np.ones((4, 8), np.float32), "FP32")]
    for i, inputs in enumerate((good, bad, good)):
        client.async_stream_infer("mlp", inputs, request_id=str(i))
    got = [results.get(timeout=30) for _ in range(3)]
    client.stop_stream()
    check(got[0][1] is None and got[2][1] is None, "stream: good requests answered")
    compare(got[0][0].as_numpy("output"), cases[0][2]["output"], "FP32", "stream/output")
    check(got[1][1] is not None and "input 'x'" in str(got[1][1]),
          "stream: bad request reported, stream continued", str(got[1][1]))
    client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--repository", type=Path, required=True)
    args = parser.parse_args()
    try:
        run(args.url, args.repository)
    except Mismatch as exc:
        print(f"FAIL {exc}", flush=True)
        return 1
    print("ALL PASS", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
