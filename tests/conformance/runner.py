#!/usr/bin/env python3
"""Python runner of the conformance suite: every case file against one live OIP server.

    python tests/conformance/runner.py --url 127.0.0.1:8001 [--cases DIR] [--features LIST]
                                       [--ca CA.pem] [--cert C.pem --key K.pem] [--token TOKEN]
                                       [--async]

(`JAXPORT_CONFORMANCE_URL` may stand in for --url.) Well-formed requests go through
`jaxport.client.InferenceClient`, the client a Python service would use; requests that a client
refuses to build on purpose (byte count not matching the shape, duplicate inputs, raw and typed
contents together) are sent as the case describes them through the generated stub, because the
point of those cases is the server's answer. Prints one PASS/FAIL/N/A line per case and
`conformance python: N passed, M failed[, K not applicable]`; exits 1 if any case failed. A call
that succeeds where the case expects an error status is a FAIL ("call succeeded (...), expected
status X"). `--features` names what the server claims beyond the core protocol (FEATURES);
cases needing more are N/A, never failures.

With `--async` the same cases run through `jaxport.client.AsyncInferenceClient` (grpc.aio) and
the generated stub on the same aio channel (summary `conformance python-async: ...`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from jaxport.client import (
    DEFAULT_MAX_MESSAGE_BYTES,
    AsyncInferenceClient,
    InferenceClient,
    InferenceServerError,
)
from jaxport.protocol import codecs, dtypes
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc

HERE = Path(__file__).resolve().parent
DEFAULT_CASES = HERE / "cases"
CUDA_RPCS = ("CudaSharedMemoryStatus", "CudaSharedMemoryRegister", "CudaSharedMemoryUnregister")
KNOWN_RPCS = ("ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata",
              "ModelInfer", "ModelStreamInfer", *CUDA_RPCS)
CALL_TIMEOUT_S = 60.0


def features_file(cases: Path) -> Path:
    """The suite's one feature table: `features.json` beside the case directory (every runner
    reads the same file)."""
    return cases.resolve().parent / "features.json"


def load_features(path: Path) -> tuple[dict[str, str], dict[str, str]]:
    """(features, extensions) of a feature table: what a case may need beyond the core protocol
    (its "requires" list) with a description each, and the ServerMetadata.extensions entries
    that claim a feature on their own. A case needing a feature the server does not claim is
    NOT-APPLICABLE."""
    table = json.loads(path.read_text(encoding="utf-8"))
    return dict(table["features"]), dict(table["extensions"])


FEATURES, EXTENSION_FEATURES = load_features(features_file(DEFAULT_CASES))


def parse_features(text: str, features: dict[str, str] | None = None) -> set[str] | None:
    """--features: "all" (None: every case applies), "core" or "" (nothing beyond the core
    protocol), or a comma list of feature names (unknown names are an error)."""
    known = FEATURES if features is None else features
    text = text.strip()
    if text == "all":
        return None
    names = {f.strip() for f in text.split(",") if f.strip() and f.strip() != "core"}
    unknown = names - set(known)
    if unknown:
        raise ValueError(f"unknown feature(s) {sorted(unknown)}; known: core, all, "
                         f"{', '.join(known)}")
    return names


def missing_features(case: dict[str, Any], claimed: set[str] | None) -> list[str]:
    """The features a case needs that the server does not claim ([] = the case applies)."""
    if claimed is None:
        return []
    return [f for f in case.get("requires", []) if f not in claimed]


def _malformed(case: dict[str, Any], req: dict[str, Any]) -> bool:
    """A request the case builds wrong on purpose (its outputs are never compared)."""
    if req["encoding"] not in ("raw", "typed"):
        return True
    names = [t["name"] for t in req["inputs"]]
    if len(set(names)) != len(names):
        return True
    return any(len(tensor_bytes(case, t)) != math.prod(t["shape"])
               * dtypes.by_datatype(t["datatype"]).itemsize for t in req["inputs"])


class CaseFailure(AssertionError):
    """The server's answer differs from what the case expects."""


# --- case files ------------------------------------------------------------------------------


def load_cases(directory: Path) -> list[dict[str, Any]]:
    """Every `*.json` case in `directory`, sorted by name, with its directory attached."""
    cases = []
    for path in sorted(directory.glob("*.json")):
        case = json.loads(path.read_text(encoding="utf-8"))
        if case.get("name") != path.stem:
            raise ValueError(f"{path}: name {case.get('name')!r} does not match the file name")
        if case.get("rpc") not in KNOWN_RPCS:
            raise ValueError(f"{path}: unknown rpc {case.get('rpc')!r}; known: {KNOWN_RPCS}")
        case["_dir"] = directory
        cases.append(case)
    if not cases:
        raise ValueError(f"no case files (*.json) in {directory}")
    return cases


def read_npy_bytes(path: Path) -> bytes:
    """The little-endian element bytes of a C-order .npy file."""
    array = np.load(path, allow_pickle=False)
    if array.dtype.byteorder == ">":
        raise ValueError(f"{path}: big-endian data; the suite stores little-endian")
    return np.ascontiguousarray(array).tobytes()


def ramp(spec: dict[str, Any], datatype: str, count: int) -> bytes:
    """Generated data: element i is start + step * (i % modulo), in `datatype`."""
    i = np.arange(count, dtype=np.int64) % int(spec["modulo"])
    values = float(spec["start"]) + float(spec["step"]) * i
    return values.astype(dtypes.by_datatype(datatype).numpy).tobytes()


def tensor_bytes(case: dict[str, Any], t: dict[str, Any]) -> bytes:
    """The bytes a case tensor describes (a data file, or a ramp of shape x datatype)."""
    if "data" in t:
        return read_npy_bytes(case["_dir"] / t["data"])
    if "ramp" in t:
        return ramp(t["ramp"], t["datatype"], math.prod(t["shape"]))
    raise ValueError(f"case {case['name']}: tensor {t['name']} has neither data nor ramp")


def as_array(datatype: str, shape: list[int], data: bytes) -> np.ndarray:
    """View bytes as the declared datatype and shape (raises if the byte count disagrees)."""
    return np.frombuffer(data, dtype=dtypes.by_datatype(datatype).numpy).reshape(shape)


# --- comparisons -----------------------------------------------------------------------------


def compare_strings(want: dict[str, Any], got: np.ndarray) -> None:
    """A BYTES output: shape, then every element equal to the expected UTF-8 text."""
    name = want["name"]
    if got.dtype != object:
        raise CaseFailure(f"output {name}: datatype {dtypes.by_numpy(got.dtype).datatype}, "
                          "expected BYTES")
    if list(got.shape) != list(want["shape"]):
        raise CaseFailure(f"output {name}: shape {list(got.shape)}, expected {want['shape']}")
    elements = [bytes(e).decode("utf-8", "replace") for e in got.ravel()]
    for k, (g, e) in enumerate(zip(elements, want["strings"], strict=True)):
        if g != e:
            raise CaseFailure(f"output {name}: flat index {k}: got {g!r}, expected {e!r}")


def compare_tensor(want: dict[str, Any], got: np.ndarray, want_bytes: bytes) -> None:
    """Datatype, shape, then values: exact for integers/BOOL, within rtol/atol for floats."""
    name = want["name"]
    got_dt = dtypes.by_numpy(got.dtype).datatype
    if got_dt != want["datatype"]:
        raise CaseFailure(f"output {name}: datatype {got_dt}, expected {want['datatype']}")
    if list(got.shape) != list(want["shape"]):
        raise CaseFailure(f"output {name}: shape {list(got.shape)}, expected {want['shape']}")
    expected = as_array(want["datatype"], want["shape"], want_bytes)
    if want["datatype"] in ("FP16", "BF16", "FP32", "FP64"):
        a, e = got.astype(np.float64), expected.astype(np.float64)
        ok = np.isclose(a, e, rtol=want["rtol"], atol=want["atol"], equal_nan=True)
        if not ok.all():
            k = int(np.argmin(ok.ravel()))
            raise CaseFailure(
                f"output {name}: {int((~ok).sum())} elements outside rtol={want['rtol']} "
                f"atol={want['atol']}; first at flat index {k}: got {a.ravel()[k]!r}, "
                f"expected {e.ravel()[k]!r}"
            )
    elif not np.array_equal(got, expected):
        k = int(np.argmax(got.ravel() != expected.ravel()))
        raise CaseFailure(f"output {name}: flat index {k}: got {got.ravel()[k]!r}, "
                          f"expected {expected.ravel()[k]!r}")


def compare_outputs(case: dict[str, Any], expect: dict[str, Any], outputs: dict[str, Any],
                    response_id: str) -> None:
    """Exactly the expected outputs, each matching; the id echoed when the case says so."""
    want = {o["name"]: o for o in expect["outputs"]}
    if set(outputs) != set(want):
        raise CaseFailure(f"outputs {sorted(outputs)}, expected {sorted(want)}")
    for name, spec in want.items():
        if spec["datatype"] == "BYTES":
            compare_strings(spec, np.asarray(outputs[name]))
        else:
            compare_tensor(spec, np.asarray(outputs[name]), tensor_bytes(case, spec))
    if "id" in expect and response_id != expect["id"]:
        raise CaseFailure(f"response id {response_id!r}, expected {expect['id']!r}")


def compare_parameters(what: str, want: dict[str, Any], got: dict[str, Any]) -> None:
    """`parameters` (each present with that value) and `parameters_absent` of an expectation."""
    for key, value in want.get("parameters", {}).items():
        if key not in got or got[key] != value or type(got[key]) is not type(value):
            raise CaseFailure(f"{what}: parameter {key!r} is {got.get(key, '(absent)')!r}, "
                              f"expected {value!r}")
    for key in want.get("parameters_absent", []):
        if key in got:
            raise CaseFailure(f"{what}: parameter {key!r} is {got[key]!r}, expected none")


def request_message(case: dict[str, Any], req: dict[str, Any]) -> pb.ModelInferRequest:
    """The wire request a case describes, exactly (raw, typed or both encodings, request
    parameters, requested outputs and their classification counts)."""
    msg = pb.ModelInferRequest(model_name=req["model"], model_version=req.get("version", ""),
                               id=req.get("id", ""))
    codecs.to_parameters(req.get("parameters", {}), msg.parameters)
    for t in req["inputs"]:
        data = tensor_bytes(case, t)
        tensor = msg.inputs.add(name=t["name"], datatype=t["datatype"], shape=t["shape"])
        if req["encoding"] in ("raw", "both"):
            msg.raw_input_contents.append(data)
        if req["encoding"] in ("typed", "both"):
            row = dtypes.by_datatype(t["datatype"])
            values = np.frombuffer(data[: len(data) // row.itemsize * row.itemsize],
                                   dtype=row.numpy)
            getattr(tensor.contents, row.contents_field).extend(values.tolist())
    classes = req.get("classification", {})
    for name in req.get("outputs", []):
        out = msg.outputs.add(name=name)
        if name in classes:
            out.parameters[codecs.CLASSIFICATION].int64_param = int(classes[name])
    return msg


def check_error(expect: dict[str, Any], code: str, message: str) -> None:
    """The status code the case expects, and a message naming what it must name."""
    if code != expect["code"]:
        raise CaseFailure(f"status {code} ({message!r}), expected {expect['code']}")
    for part in expect.get("message_contains", []):
        if part not in message:
            raise CaseFailure(f"status message {message!r} does not mention {part!r}")


# --- running ---------------------------------------------------------------------------------


@dataclass
class Runner:
    """Runs cases against one server through jaxport.client (and the raw stub, see above)."""

    client: InferenceClient | AsyncAdapter
    stub: Any  # pb_grpc.GRPCInferenceServiceStub, or AsyncAdapter.blocking_stub()
    metadata: tuple[tuple[str, str], ...] = ()

    def run(self, case: dict[str, Any]) -> None:
        """Raise CaseFailure (or any error) unless the server answers as the case expects."""
        expect = case["expect"]
        if expect["code"] == "OK":
            handler: Callable[[dict[str, Any], dict[str, Any]], None] = getattr(
                self, "_" + case["rpc"]
            )
            try:
                handler(case, expect)
            except InferenceServerError as exc:
                raise CaseFailure(f"status {exc.code} ({exc.message!r}), expected OK") from exc
            return
        try:
            answer = self.call_only(case)
        except InferenceServerError as exc:
            check_error(expect, exc.code, exc.message)
            return
        # An answer where an error status was expected: never compared as if it were the
        # expected output (a case expecting NOT_FOUND has no outputs to compare with).
        raise CaseFailure(f"call succeeded ({answer}), expected status {expect['code']}")

    def call_only(self, case: dict[str, Any]) -> str:
        """Make the case's call without judging the answer; describe what came back."""
        req = case.get("request", {})
        rpc = case["rpc"]
        if rpc == "ServerLive":
            return f"live={self.client.server_live(timeout=CALL_TIMEOUT_S)}"
        if rpc == "ServerReady":
            return f"ready={self.client.server_ready(timeout=CALL_TIMEOUT_S)}"
        if rpc == "ModelReady":
            ready = self.client.model_ready(req["model"], req.get("version", ""),
                                            timeout=CALL_TIMEOUT_S)
            return f"ready={ready}"
        if rpc == "ServerMetadata":
            meta = self.client.server_metadata(timeout=CALL_TIMEOUT_S)
            return f"name={meta.name!r}"
        if rpc == "ModelMetadata":
            meta = self.client.model_metadata(req["model"], req.get("version", ""),
                                              timeout=CALL_TIMEOUT_S)
            return f"name={meta.name!r} versions={list(meta.versions)}"
        if rpc == "ModelInfer":
            outputs, _, (model_name, version) = self._infer_once(case, req)
            return (f"model {model_name!r} version {version!r}, outputs "
                    f"{sorted(outputs)}")
        if rpc == "ModelStreamInfer":
            reqs = req["requests"]
            feeds = [{t["name"]: as_array(t["datatype"], t["shape"], tensor_bytes(case, t))
                      for t in r["inputs"]} for r in reqs]
            results = list(self.client.stream_infer(reqs[0]["model"], feeds,
                                                    timeout=CALL_TIMEOUT_S, raise_errors=False))
            return f"{len(results)} stream responses"
        if rpc in CUDA_RPCS:
            return f"{rpc} answered {self._cuda(rpc, req)}"
        raise ValueError(f"unknown rpc {rpc!r}")

    def _cuda(self, rpc: str, req: dict[str, Any]) -> Any:
        """One CUDA shared-memory RPC through the generated stub; its response."""
        if rpc == "CudaSharedMemoryRegister":
            msg: Any = pb.CudaSharedMemoryRegisterRequest(
                name=req["name"], device_id=int(req.get("device_id", 0)),
                byte_size=int(req.get("byte_size", 0)))
        else:
            msg = getattr(pb, rpc + "Request")(name=req.get("name", ""))
        try:
            return getattr(self.stub, rpc)(msg, timeout=CALL_TIMEOUT_S, metadata=self.metadata)
        except grpc.RpcError as exc:
            raise InferenceServerError.from_rpc_error(exc) from exc

    def _CudaSharedMemoryStatus(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        regions = sorted(self._cuda(case["rpc"], case["request"]).regions)
        if "regions" in expect and regions != sorted(expect["regions"]):
            raise CaseFailure(f"regions {regions}, expected {sorted(expect['regions'])}")

    def _CudaSharedMemoryRegister(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        self._cuda(case["rpc"], case["request"])

    def _CudaSharedMemoryUnregister(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        self._cuda(case["rpc"], case["request"])

    def _ServerLive(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        if self.client.server_live(timeout=CALL_TIMEOUT_S) is not expect["live"]:
            raise CaseFailure(f"live is not {expect['live']}")

    def _ServerReady(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        if self.client.server_ready(timeout=CALL_TIMEOUT_S) is not expect["ready"]:
            raise CaseFailure(f"ready is not {expect['ready']}")

    def _ModelReady(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        req = case["request"]
        ready = self.client.model_ready(req["model"], req.get("version", ""),
                                        timeout=CALL_TIMEOUT_S)
        if ready is not expect["ready"]:
            raise CaseFailure(f"model ready is {ready}, expected {expect['ready']}")

    def _ServerMetadata(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        meta = self.client.server_metadata(timeout=CALL_TIMEOUT_S)
        for field_name in expect.get("nonempty", []):
            if not getattr(meta, field_name):
                raise CaseFailure(f"server metadata field {field_name} is empty")
        missing = set(expect.get("extensions_include", [])) - set(meta.extensions)
        if missing:
            raise CaseFailure(f"extensions {meta.extensions} lack {sorted(missing)}")

    def _ModelMetadata(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        req = case["request"]
        meta = self.client.model_metadata(req["model"], req.get("version", ""),
                                          timeout=CALL_TIMEOUT_S)
        if meta.name != expect["name"]:
            raise CaseFailure(f"name {meta.name!r}, expected {expect['name']!r}")
        missing = set(expect.get("versions_include", [])) - set(meta.versions)
        if missing:
            raise CaseFailure(f"versions {meta.versions} lack {sorted(missing)}")
        for kind in ("inputs", "outputs"):
            got = [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
                   for t in getattr(meta, kind)]
            if got != expect[kind]:
                raise CaseFailure(f"{kind} {got}, expected {expect[kind]}")

    def _infer_once(
        self, case: dict[str, Any], req: dict[str, Any]
    ) -> tuple[dict[str, Any], str, tuple[str, str]]:
        tensors = [(t, tensor_bytes(case, t)) for t in req["inputs"]]
        # The client sends what it can build; requested-output parameters (classification)
        # and deliberately malformed requests go through the generated stub.
        well_formed = not _malformed(case, req) and not req.get("classification")
        if well_formed:
            result = self.client.infer(
                req["model"],
                {t["name"]: as_array(t["datatype"], t["shape"], b) for t, b in tensors},
                outputs=req.get("outputs"), version=req.get("version", ""),
                request_id=req.get("id", ""), raw=req["encoding"] == "raw",
                parameters=req.get("parameters"), timeout=CALL_TIMEOUT_S,
            )
            return result.outputs, result.id, (result.model_name, result.model_version)
        return self._infer_raw(case, req)

    def _infer_raw(self, case: dict[str, Any], req: dict[str, Any]
                   ) -> tuple[dict[str, Any], str, tuple[str, str]]:
        """The request exactly as the case describes it, through the generated stub (for what
        the client refuses to build, and for requested-output parameters it does not send)."""
        msg = request_message(case, req)
        try:
            resp = self.stub.ModelInfer(msg, timeout=CALL_TIMEOUT_S, metadata=self.metadata)
        except grpc.RpcError as exc:
            raise InferenceServerError.from_rpc_error(exc) from exc
        if not _malformed(case, req):
            outputs: dict[str, Any] = codecs.decode_infer_response(resp)
        else:
            # Accepted: the caller (run) reports it; outputs are named, never compared (a
            # malformed request has no expected outputs).
            outputs = {o.name: None for o in resp.outputs}
        return outputs, resp.id, (resp.model_name, resp.model_version)

    def _ModelInfer(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        n = int(case.get("parallel", 1))
        with ThreadPoolExecutor(max_workers=n) as pool:
            results = list(pool.map(lambda _: self._infer_once(case, case["request"]), range(n)))
        for outputs, rid, (model_name, model_version) in results:
            compare_outputs(case, expect, outputs, rid)
            for key, got in (("model_name", model_name), ("model_version", model_version)):
                if key in expect and got != expect[key]:
                    raise CaseFailure(f"response {key} {got!r}, expected {expect[key]!r}")

    def _stream_raw(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        """A stream whose requests carry their own parameters: each request exactly as the case
        describes it, through the generated stub; responses matched by the case's ids."""
        reqs = case["request"]["requests"]
        messages = [request_message(case, r) for r in reqs]
        try:
            responses = list(self.stub.ModelStreamInfer(iter(messages), timeout=CALL_TIMEOUT_S,
                                                        metadata=self.metadata))
        except grpc.RpcError as exc:
            raise InferenceServerError.from_rpc_error(exc) from exc
        if len(responses) != len(reqs):
            raise CaseFailure(f"{len(responses)} stream responses, expected {len(reqs)}")
        by_id = {r.infer_response.id: r for r in responses}
        for want in expect["responses"]:
            r = by_id.get(want["id"])
            if r is None:
                raise CaseFailure(f"no stream response for request {want['id']!r}")
            if r.error_message:
                raise CaseFailure(f"stream request {want['id']!r} failed: {r.error_message}")
            compare_outputs(case, {"outputs": want["outputs"]},
                            codecs.decode_infer_response(r.infer_response), want["id"])
            compare_parameters(f"stream response {want['id']!r}", want,
                               codecs.from_parameters(r.infer_response.parameters))

    def _ModelStreamInfer(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        reqs = case["request"]["requests"]
        if any("parameters" in r for r in reqs):
            self._stream_raw(case, expect)
            return
        models = {r["model"] for r in reqs}
        if len(models) != 1:
            raise ValueError(f"case {case['name']}: one model per stream, got {sorted(models)}")
        feeds = [{t["name"]: as_array(t["datatype"], t["shape"], tensor_bytes(case, t))
                  for t in r["inputs"]} for r in reqs]
        # jaxport.client numbers the stream's requests "0", "1", ...: map back to the case ids.
        results = list(self.client.stream_infer(models.pop(), feeds, timeout=CALL_TIMEOUT_S,
                                                raise_errors=False))
        if len(results) != len(reqs):
            raise CaseFailure(f"{len(results)} stream responses, expected {len(reqs)}")
        by_case_id = {reqs[int(r.id)]["id"]: r for r in results if r.id.isdigit()}
        for want in expect["responses"]:
            if want["id"] not in by_case_id:
                raise CaseFailure(f"no stream response for request {want['id']!r}")
            r = by_case_id[want["id"]]
            if "error_contains" in want:
                if not r.error:
                    raise CaseFailure(f"stream request {want['id']!r} succeeded, expected an "
                                      "error_message")
                for part in want["error_contains"]:
                    if part not in r.error:
                        raise CaseFailure(f"stream error {r.error!r} does not mention {part!r}")
                continue
            if r.error:
                raise CaseFailure(f"stream request {want['id']!r} failed: {r.error}")
            compare_outputs(case, {"outputs": want["outputs"]}, r.outputs, want["id"])


class AsyncAdapter:
    """An AsyncInferenceClient behind the blocking calls the Runner makes: each call is awaited
    on one event loop running in a background thread, so a `parallel` case still has N requests
    in flight at once (on that loop). The aio channel and client are created on the loop."""

    def __init__(self, make_channel: Callable[[], grpc.aio.Channel], token: str | None) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

        async def make() -> AsyncInferenceClient:
            return AsyncInferenceClient(channel=make_channel(), token=token)

        self.client = self.run(make)

    def run(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        """Call fn on the loop and wait for the result of what it returns."""
        async def call() -> Any:
            return await fn()
        return asyncio.run_coroutine_threadsafe(call(), self._loop).result()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        method = getattr(self.client, name)

        def blocking(*args: Any, **kwargs: Any) -> Any:
            if name == "stream_infer":
                async def collect() -> list[Any]:
                    return [r async for r in method(*args, **kwargs)]
                return self.run(collect)
            return self.run(lambda: method(*args, **kwargs))
        return blocking

    def blocking_stub(self) -> Any:
        """The generated stub on the client's aio channel, awaited per call."""
        stub = pb_grpc.GRPCInferenceServiceStub(self.client.channel)
        adapter = self

        class Stub:
            def __getattr__(self, name: str) -> Callable[..., Any]:
                method = getattr(stub, name)

                def unary(request: Any, **kwargs: Any) -> Any:
                    return adapter.run(lambda: method(request, **kwargs))
                return unary

            def ModelStreamInfer(self, requests: Any, **kwargs: Any) -> Any:
                async def collect() -> list[Any]:
                    return [r async for r in stub.ModelStreamInfer(requests, **kwargs)]
                return adapter.run(collect)
        return Stub()

    def close(self) -> None:
        async def close_channel() -> None:
            await self.client.channel.close()
        self.run(close_channel)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


def main(argv: list[str] | None = None) -> int:
    """Run every case; print per-case lines and the summary; 0 only if none failed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("JAXPORT_CONFORMANCE_URL"),
                        help="server host:port (default $JAXPORT_CONFORMANCE_URL)")
    parser.add_argument("--cases", type=Path, default=DEFAULT_CASES, help="case directory")
    parser.add_argument("--features-file", type=Path, default=None,
                        help="the feature table (default: features.json beside --cases)")
    parser.add_argument("--features", default="all",
                        help="what the server claims beyond the core protocol: 'all' (default), "
                             "'core', or a comma list of " + ", ".join(FEATURES) + "; cases "
                             "needing more are NOT-APPLICABLE (with anything but 'all', features "
                             "named by ServerMetadata.extensions are added)")
    parser.add_argument("--protocol-only", action="store_true",
                        help="the same as --features core")
    parser.add_argument("--run", default="", help="only cases whose name contains this")
    parser.add_argument("--ca", type=Path, default=os.environ.get("JAXPORT_CONFORMANCE_CA"),
                        help="PEM CA certificate: use TLS (default $JAXPORT_CONFORMANCE_CA)")
    parser.add_argument("--cert", type=Path, default=os.environ.get("JAXPORT_CONFORMANCE_CERT"),
                        help="PEM client certificate for mutual TLS, with --key "
                             "(default $JAXPORT_CONFORMANCE_CERT)")
    parser.add_argument("--key", type=Path, default=os.environ.get("JAXPORT_CONFORMANCE_KEY"),
                        help="PEM private key of --cert (default $JAXPORT_CONFORMANCE_KEY)")
    parser.add_argument("--token", default=os.environ.get("JAXPORT_CONFORMANCE_TOKEN"),
                        help="bearer token sent on every call ($JAXPORT_CONFORMANCE_TOKEN)")
    parser.add_argument("--async", dest="use_async", action="store_true",
                        help="run the cases through AsyncInferenceClient (grpc.aio)")
    args = parser.parse_args(argv)
    if not args.url:
        parser.error("--url (or JAXPORT_CONFORMANCE_URL) is required")
    if bool(args.cert) != bool(args.key):
        parser.error("--cert and --key (JAXPORT_CONFORMANCE_CERT/KEY) go together")
    try:
        features, extension_features = load_features(
            args.features_file or features_file(args.cases))
        claimed = parse_features("core" if args.protocol_only else args.features, features)
        cases = load_cases(args.cases)
    except (OSError, ValueError) as exc:
        print(f"conformance python: error: {exc}", file=sys.stderr)
        return 2
    passed = failed = not_applicable = 0
    options = [("grpc.max_send_message_length", DEFAULT_MAX_MESSAGE_BYTES),
               ("grpc.max_receive_message_length", DEFAULT_MAX_MESSAGE_BYTES)]
    credentials = None
    if args.ca or args.cert:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=Path(args.ca).read_bytes() if args.ca else None,
            private_key=Path(args.key).read_bytes() if args.key else None,
            certificate_chain=Path(args.cert).read_bytes() if args.cert else None)
    metadata = (("authorization", f"Bearer {args.token}"),) if args.token else ()
    # One channel, shared by the client and the raw stub (the client takes an existing channel).
    client: InferenceClient | AsyncAdapter
    if args.use_async:
        label = "python-async"

        def make_channel() -> grpc.aio.Channel:
            if credentials is not None:
                return grpc.aio.secure_channel(args.url, credentials, options=options)
            return grpc.aio.insecure_channel(args.url, options=options)

        client = AsyncAdapter(make_channel, args.token)
        stub = client.blocking_stub()
        close = client.close
    else:
        label = "python"
        channel = (grpc.secure_channel(args.url, credentials, options=options)
                   if credentials is not None else grpc.insecure_channel(args.url, options=options))
        client = InferenceClient(channel=channel, token=args.token)
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        close = channel.close
    try:
        runner = Runner(client, stub, metadata)
        if claimed is not None:
            try:
                extensions = client.server_metadata(timeout=CALL_TIMEOUT_S).extensions
            except InferenceServerError:
                extensions = []  # metadata_server reports that failure
            claimed |= {extension_features[x] for x in extensions if x in extension_features}
            claimed |= {x for x in extensions if x in features}
            print(f"features claimed: {', '.join(sorted(claimed)) or 'core only'}")
        for case in cases:
            if args.run and args.run not in case["name"]:
                continue
            missing = missing_features(case, claimed)
            if missing:
                print(f"N/A {case['name']} (needs {', '.join(missing)})")
                not_applicable += 1
                continue
            start = time.perf_counter()
            try:
                runner.run(case)
            except CaseFailure as exc:
                failed += 1
                print(f"FAIL {case['name']}: {exc}")
                continue
            except Exception as exc:  # a failed case is reported, never fatal to the run
                failed += 1
                print(f"FAIL {case['name']}: {type(exc).__name__}: {exc}")
                continue
            passed += 1
            print(f"PASS {case['name']} ({(time.perf_counter() - start) * 1e3:.0f} ms)")
    finally:
        close()
    tail = f", {not_applicable} not applicable" if not_applicable else ""
    print(f"conformance {label}: {passed} passed, {failed} failed{tail}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
