"""The gRPC runner: judges every case against one live server through the generated stub.

`Runner(stub)` makes every call exactly as the case describes it (the installed tool). Given a
high-level `client` as well (jaxport.client.InferenceClient or the asyncio adapter of
tests/conformance/runner.py), health, metadata, well-formed inferences and plain streams go
through that client instead, the way a Python service would call, and its errors (`errors`,
each with `.code` and `.message`) count as the server's statuses; requests a client refuses to
build on purpose (byte count not matching the shape, duplicate inputs, raw and typed together)
and requested-output parameters always go through the stub, because the point of those cases
is the server's answer.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import grpc

from jaxport_conformance import suite
from jaxport_conformance._proto import pb
from jaxport_conformance.suite import CALL_TIMEOUT_S, CaseFailure, ServerError


@dataclass
class Runner:
    """Runs cases against one server (see the module docstring for `client` and `errors`)."""

    stub: Any  # pb_grpc.GRPCInferenceServiceStub, or an adapter with the same calls
    metadata: tuple[tuple[str, str], ...] = ()
    client: Any = None
    errors: tuple[type[BaseException], ...] = (ServerError,)
    #: A case tensor as the client's input array (datatype, shape, bytes); client path only.
    to_array: Callable[[str, list[int], bytes], Any] | None = None

    def _stub_call(self, rpc: str, msg: Any, compression: Any = None) -> Any:
        try:
            return getattr(self.stub, rpc)(msg, timeout=CALL_TIMEOUT_S, metadata=self.metadata,
                                           compression=compression)
        except grpc.RpcError as exc:
            raise ServerError.from_rpc_error(exc) from exc

    def run(self, case: dict[str, Any]) -> None:
        """Raise CaseFailure (or any error) unless the server answers as the case expects (or
        as one of its alternatives: suite.judge)."""
        suite.judge(self._run_one, case)

    def _run_one(self, case: dict[str, Any]) -> None:
        expect = case["expect"]
        if expect["code"] == "OK":
            try:
                getattr(self, "_" + case["rpc"])(case, expect)
            except self.errors as exc:
                raise CaseFailure(f"status {exc.code} ({exc.message!r}), expected OK") from exc
            return
        try:
            answer = self.call_only(case)
        except self.errors as exc:
            suite.check_error(expect, exc.code, exc.message)
            return
        # An answer where an error status was expected: never compared as if it were the
        # expected output (a case expecting NOT_FOUND has no outputs to compare with).
        raise CaseFailure(f"call succeeded ({answer}), expected status {expect['code']}")

    # --- the calls -----------------------------------------------------------------------

    def server_live(self) -> bool:
        if self.client is not None:
            return self.client.server_live(timeout=CALL_TIMEOUT_S)
        return self._stub_call("ServerLive", pb.ServerLiveRequest()).live

    def server_ready(self) -> bool:
        if self.client is not None:
            return self.client.server_ready(timeout=CALL_TIMEOUT_S)
        return self._stub_call("ServerReady", pb.ServerReadyRequest()).ready

    def model_ready(self, model: str, version: str) -> bool:
        if self.client is not None:
            return self.client.model_ready(model, version, timeout=CALL_TIMEOUT_S)
        return self._stub_call("ModelReady",
                               pb.ModelReadyRequest(name=model, version=version)).ready

    def server_metadata(self) -> Any:
        if self.client is not None:
            return self.client.server_metadata(timeout=CALL_TIMEOUT_S)
        return self._stub_call("ServerMetadata", pb.ServerMetadataRequest())

    def model_metadata(self, model: str, version: str) -> Any:
        if self.client is not None:
            return self.client.model_metadata(model, version, timeout=CALL_TIMEOUT_S)
        return self._stub_call("ModelMetadata",
                               pb.ModelMetadataRequest(name=model, version=version))

    def call_only(self, case: dict[str, Any]) -> str:
        """Make the case's call without judging the answer; describe what came back."""
        req = case.get("request", {})
        rpc = case["rpc"]
        if rpc == "ServerLive":
            return f"live={self.server_live()}"
        if rpc == "ServerReady":
            return f"ready={self.server_ready()}"
        if rpc == "ModelReady":
            return f"ready={self.model_ready(req['model'], req.get('version', ''))}"
        if rpc == "ServerMetadata":
            return f"name={self.server_metadata().name!r}"
        if rpc == "ModelMetadata":
            meta = self.model_metadata(req["model"], req.get("version", ""))
            return f"name={meta.name!r} versions={list(meta.versions)}"
        if rpc == "ModelInfer":
            outputs, _, (model_name, version) = self._infer_once(case, req)
            return f"model {model_name!r} version {version!r}, outputs {sorted(outputs)}"
        if rpc == "ModelStreamInfer":
            return f"{len(self._stream_responses(case))} stream responses"
        if rpc in suite.CUDA_RPCS:
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
        return self._stub_call(rpc, msg)

    # --- the verdicts --------------------------------------------------------------------

    def _CudaSharedMemoryStatus(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        regions = sorted(self._cuda(case["rpc"], case["request"]).regions)
        if "regions" in expect and regions != sorted(expect["regions"]):
            raise CaseFailure(f"regions {regions}, expected {sorted(expect['regions'])}")

    def _CudaSharedMemoryRegister(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        self._cuda(case["rpc"], case["request"])

    def _CudaSharedMemoryUnregister(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        self._cuda(case["rpc"], case["request"])

    def _ServerLive(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        if self.server_live() is not expect["live"]:
            raise CaseFailure(f"live is not {expect['live']}")

    def _ServerReady(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        if self.server_ready() is not expect["ready"]:
            raise CaseFailure(f"ready is not {expect['ready']}")

    def _ModelReady(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        req = case["request"]
        ready = self.model_ready(req["model"], req.get("version", ""))
        if ready is not expect["ready"]:
            raise CaseFailure(f"model ready is {ready}, expected {expect['ready']}")

    def _ServerMetadata(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        meta = self.server_metadata()
        for field_name in expect.get("nonempty", []):
            if not getattr(meta, field_name):
                raise CaseFailure(f"server metadata field {field_name} is empty")
        missing = set(expect.get("extensions_include", [])) - set(meta.extensions)
        if missing:
            raise CaseFailure(f"extensions {list(meta.extensions)} lack {sorted(missing)}")

    def _ModelMetadata(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        req = case["request"]
        meta = self.model_metadata(req["model"], req.get("version", ""))
        if meta.name != expect["name"]:
            raise CaseFailure(f"name {meta.name!r}, expected {expect['name']!r}")
        missing = set(expect.get("versions_include", [])) - set(meta.versions)
        if missing:
            raise CaseFailure(f"versions {list(meta.versions)} lack {sorted(missing)}")
        for kind in ("inputs", "outputs"):
            got = [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
                   for t in getattr(meta, kind)]
            if got != expect[kind]:
                raise CaseFailure(f"{kind} {got}, expected {expect[kind]}")

    def _infer_once(
        self, case: dict[str, Any], req: dict[str, Any]
    ) -> tuple[dict[str, Any], str, tuple[str, str]]:
        # The client sends what it can build; requested-output parameters (classification),
        # gRPC message compression and deliberately malformed requests go through the
        # generated stub.
        compression = grpc_compression(case)
        if (self.client is not None and not suite.malformed(case, req)
                and not req.get("classification") and compression is None):
            assert self.to_array is not None
            result = self.client.infer(
                req["model"],
                {t["name"]: self.to_array(t["datatype"], t["shape"], suite.tensor_bytes(case, t))
                 for t in req["inputs"]},
                outputs=req.get("outputs"), version=req.get("version", ""),
                request_id=req.get("id", ""), raw=req["encoding"] == "raw",
                parameters=req.get("parameters"), timeout=CALL_TIMEOUT_S,
            )
            return result.outputs, result.id, (result.model_name, result.model_version)
        resp = self._stub_call("ModelInfer", suite.request_message(case, req), compression)
        if suite.malformed(case, req):
            # Accepted: the caller (run) reports it; outputs are named, never compared (a
            # malformed request has no expected outputs).
            outputs: dict[str, Any] = {o.name: None for o in resp.outputs}
        else:
            outputs = suite.decode_response(resp)
        return outputs, resp.id, (resp.model_name, resp.model_version)

    def _ModelInfer(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        n = int(case.get("parallel", 1))
        with ThreadPoolExecutor(max_workers=n) as pool:
            results = list(pool.map(lambda _: self._infer_once(case, case["request"]), range(n)))
        for outputs, rid, (model_name, model_version) in results:
            suite.compare_outputs(case, expect, outputs, rid)
            for key, got in (("model_name", model_name), ("model_version", model_version)):
                if key in expect and got != expect[key]:
                    raise CaseFailure(f"response {key} {got!r}, expected {expect[key]!r}")

    def _stream_responses(self, case: dict[str, Any]) -> list[Any]:
        """The stream's responses to the case's requests, each exactly as the case describes
        it, through the generated stub."""
        messages = [suite.request_message(case, r) for r in case["request"]["requests"]]
        try:
            return list(self.stub.ModelStreamInfer(iter(messages), timeout=CALL_TIMEOUT_S,
                                                   metadata=self.metadata))
        except grpc.RpcError as exc:
            raise ServerError.from_rpc_error(exc) from exc

    def _stream_raw(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        """The stream through the stub; responses matched by the case's ids."""
        reqs = case["request"]["requests"]
        responses = self._stream_responses(case)
        if len(responses) != len(reqs):
            raise CaseFailure(f"{len(responses)} stream responses, expected {len(reqs)}")
        by_id = {r.infer_response.id: r for r in responses}
        for want in expect["responses"]:
            r = by_id.get(want["id"])
            if r is None:
                raise CaseFailure(f"no stream response for request {want['id']!r}")
            if "error_contains" in want:
                check_stream_error(want, r.error_message)
                continue
            if r.error_message:
                raise CaseFailure(f"stream request {want['id']!r} failed: {r.error_message}")
            suite.compare_outputs(case, {"outputs": want["outputs"]},
                                  suite.decode_response(r.infer_response), want["id"])
            suite.compare_parameters(f"stream response {want['id']!r}", want,
                                     suite.from_parameters(r.infer_response.parameters))

    def _ModelStreamInfer(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        reqs = case["request"]["requests"]
        if self.client is None or any("parameters" in r for r in reqs):
            self._stream_raw(case, expect)
            return
        models = {r["model"] for r in reqs}
        if len(models) != 1:
            raise ValueError(f"case {case['name']}: one model per stream, got {sorted(models)}")
        assert self.to_array is not None
        feeds = [{t["name"]: self.to_array(t["datatype"], t["shape"], suite.tensor_bytes(case, t))
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
                check_stream_error(want, r.error)
                continue
            if r.error:
                raise CaseFailure(f"stream request {want['id']!r} failed: {r.error}")
            suite.compare_outputs(case, {"outputs": want["outputs"]}, r.outputs, want["id"])


#: A case's "grpc_compression" as grpcio's per-call compression (grpc-encoding of the request;
#: grpcio's deflate is a zlib stream, as gRPC core writes it).
COMPRESSIONS = {"gzip": grpc.Compression.Gzip, "deflate": grpc.Compression.Deflate}


def grpc_compression(case: dict[str, Any]) -> grpc.Compression | None:
    """The compression a case sends its request with (None: uncompressed); ValueError naming an
    algorithm the runner does not know."""
    name = case.get("grpc_compression")
    if name is None:
        return None
    if name not in COMPRESSIONS:
        raise ValueError(f"case {case['name']}: grpc_compression {name!r} is not one of "
                         f"{sorted(COMPRESSIONS)}")
    return COMPRESSIONS[name]


def check_stream_error(want: dict[str, Any], error: str) -> None:
    """A stream response that must carry an error_message naming what the case says."""
    if not error:
        raise CaseFailure(f"stream request {want['id']!r} succeeded, expected an error_message")
    for part in want["error_contains"]:
        if part not in error:
            raise CaseFailure(f"stream error {error!r} does not mention {part!r}")
