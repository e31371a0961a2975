"""Triton fidelity with `tritonclient[grpc]` (issue 14): partial batches without --batching and
the classification extension (`InferRequestedOutput(name, class_count=k)`).

MUST run in its own process (tritonclient's `inference.*` protobuf symbols clash with ours).
Serves `cls` from test_bridge_triton_fidelity.py: exported with batch sizes 1,4, input
x: FP32[-1, 8]; outputs logits = x[:, :5] (FP32, labelled ant, bee, cat, dog, eel) and
counts = 10 * x[:, :5] truncated to INT64 (no labels), so every expected value is known
exactly here. Prints `PASS <check>`, exits 1 on the
first mismatch.

    python triton_fidelity.py --url 127.0.0.1:PORT

With `--model clsb` it checks `clsb` instead: the same function exported with a symbolic batch
dimension (`--dim B=1..8`, x: FP32[B, 8]) and no --batch-sizes, whose classification must be
per row (B is dimension 0 of every input and output) with the same answers as `cls`.
"""

from __future__ import annotations

import argparse
import queue
import sys

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

ROWS = np.array([
    [0.5, 2.25, -1.0, 3.0, 0.125, 9, 9, 9],
    [-2.0, -0.5, 1.5, 1.5, -3.0, 9, 9, 9],
    [7.0, 6.0, 5.0, 4.0, 3.0, 9, 9, 9],
], np.float32)


class Mismatch(Exception):
    """A check failed."""


def check(cond: bool, name: str, why: object = "") -> None:
    if not cond:
        raise Mismatch(f"{name}: {why}")
    print(f"PASS {name}", flush=True)


def x_input(rows: np.ndarray) -> grpcclient.InferInput:
    x = grpcclient.InferInput("x", list(rows.shape), "FP32")
    x.set_data_from_numpy(rows)
    return x


#: ROWS classified: logits (labelled) top 3 and counts (no labels) top 2, per row.
LOGITS_TOP3 = [[b"3.000000:3:dog", b"2.250000:1:bee", b"0.500000:0:ant"],
               [b"1.500000:2:cat", b"1.500000:3:dog", b"-0.500000:1:bee"],
               [b"7.000000:0:ant", b"6.000000:1:bee", b"5.000000:2:cat"]]
COUNTS_TOP2 = [[b"30:3", b"22:1"], [b"15:2", b"15:3"], [b"70:0", b"60:1"]]


def run_rows(url: str) -> None:
    """`clsb` (batch axis B from --dim): per-row top-k with labels, as `cls` answers."""
    client = grpcclient.InferenceServerClient(url=url)
    config = client.get_model_config("clsb").config
    check(config.max_batch_size == 0 and list(config.input[0].dims) == [-1, 8],
          "clsb config: max_batch_size 0, dims [-1, 8]", config)
    outputs = [grpcclient.InferRequestedOutput("logits", class_count=3),
               grpcclient.InferRequestedOutput("counts", class_count=2)]
    for n in (3, 1):
        result = client.infer("clsb", [x_input(ROWS[:n])], outputs=outputs)
        meta = {o.name: (o.datatype, list(o.shape)) for o in result.get_response().outputs}
        check(meta == {"logits": ("BYTES", [n, 3]), "counts": ("BYTES", [n, 2])},
              f"--dim B classification of {n} row(s): BYTES, shape [B, k]", meta)
        check(result.as_numpy("logits").tolist() == LOGITS_TOP3[:n]
              and result.as_numpy("counts").tolist() == COUNTS_TOP2[:n],
              f"--dim B classification of {n} row(s): per row, with labels",
              (result.as_numpy("logits"), result.as_numpy("counts")))
    client.close()


def run(url: str) -> None:
    client = grpcclient.InferenceServerClient(url=url)
    config = client.get_model_config("cls").config
    check(config.max_batch_size == 4 and list(config.input[0].dims) == [8],
          "config: max_batch_size 4, dims [8]", config)

    # Any batch size up to max_batch_size, without --batching; only the request's rows return.
    for n in (1, 2, 3, 4):
        rows = np.resize(ROWS, (n, 8)).astype(np.float32)
        result = client.infer("cls", [x_input(rows)])
        logits, counts = result.as_numpy("logits"), result.as_numpy("counts")
        check(logits.shape == (n, 5) and np.array_equal(logits, rows[:, :5])
              and counts.dtype == np.int64 and np.array_equal(counts, np.trunc(rows[:, :5] * 10)),
              f"batch {n} without --batching", (logits, counts))
    try:
        client.infer("cls", [x_input(np.zeros((5, 8), np.float32))])
        raise Mismatch("a batch of 5 > max_batch_size 4 succeeded")
    except InferenceServerException as exc:
        check("INVALID_ARGUMENT" in str(exc.status()) and "max_batch_size 4" in exc.message(),
              "batch 5 -> INVALID_ARGUMENT naming max_batch_size", exc)

    # Classification: FP32 and INT64 outputs, per batch row, Triton's "value:index" format.
    outputs = [grpcclient.InferRequestedOutput("logits", class_count=3),
               grpcclient.InferRequestedOutput("counts", class_count=2)]
    result = client.infer("cls", [x_input(ROWS)], outputs=outputs)
    got = result.as_numpy("logits")
    meta = {o.name: (o.datatype, list(o.shape)) for o in result.get_response().outputs}
    check(meta == {"logits": ("BYTES", [3, 3]), "counts": ("BYTES", [3, 2])},
          "classification: BYTES, shape [batch, k]", meta)
    check(got.tolist() == LOGITS_TOP3,
          "classification FP32 with labels: value:index:label, descending, ties by index", got)
    got = result.as_numpy("counts")
    check(got.tolist() == COUNTS_TOP2,
          "classification INT64 without labels: integer value:index", got)

    result = client.infer("cls", [x_input(ROWS[:1])],
                          outputs=[grpcclient.InferRequestedOutput("logits", class_count=9)])
    got = result.as_numpy("logits")
    check(got.shape == (1, 5) and result.as_numpy("counts") is None,
          "class_count > classes: all 5, only the requested output", got)

    # The same through a stream.
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    client.async_stream_infer("cls", [x_input(ROWS[2:])], request_id="s1",
                              outputs=[grpcclient.InferRequestedOutput("logits", class_count=1)])
    result, error = results.get(timeout=30)
    check(error is None and result.as_numpy("logits").tolist() == [[b"7.000000:0:ant"]],
          "classification in a stream", (result and result.as_numpy("logits"), error))
    # Triton 2.51 marks every stream response final, asked or not (docs/conformance-report.md).
    final = result.get_response().parameters.get("triton_final_response")
    check(final is not None and final.bool_param,
          "stream: triton_final_response=true on the response, as Triton", result.get_response())
    # enable_empty_final_response: the one response of a (never decoupled) model is final.
    client.async_stream_infer("cls", [x_input(ROWS[:2])], request_id="s2",
                              enable_empty_final_response=True)
    client.async_stream_infer("cls", [x_input(np.zeros((5, 8), np.float32))], request_id="s3",
                              enable_empty_final_response=True)
    (ok, ok_error), (_, bad_error) = results.get(timeout=30), results.get(timeout=30)
    params = ok.get_response().parameters
    check(ok_error is None and params["triton_final_response"].bool_param
          and ok.get_response().id == "s2" and ok.as_numpy("logits").shape == (2, 5),
          "stream: triton_final_response on the response", ok.get_response())
    check(bad_error is not None and "max_batch_size" in str(bad_error),
          "stream: failed request reported with enable_empty_final_response", bad_error)
    client.stop_stream()

    try:
        client.infer("cls", [x_input(ROWS)],
                     outputs=[grpcclient.InferRequestedOutput("nope", class_count=1)])
        raise Mismatch("classification of an unknown output succeeded")
    except InferenceServerException as exc:
        check("INVALID_ARGUMENT" in str(exc.status()) and "'nope'" in exc.message(),
              "classification of an unknown output -> INVALID_ARGUMENT", exc)
    client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", required=True)
    parser.add_argument("--model", choices=("cls", "clsb"), default="cls")
    args = parser.parse_args()
    try:
        (run_rows if args.model == "clsb" else run)(args.url)
    except Mismatch as exc:
        print(f"FAIL {exc}", flush=True)
        return 1
    print("ALL PASS", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
