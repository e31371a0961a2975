"""The REST runner: every case against one live OIP HTTP/REST endpoint (KServe v2 JSON with
Triton's binary tensor data extension), standard library only (http.client).

The same cases, features and judging as the gRPC runner (`suite`): a case with `"encoding":
"raw"` sends every input as binary data after the JSON (`binary_data_size`) and asks for binary
outputs; `"typed"` sends JSON `data` arrays and reads JSON outputs (FP16/BF16, which JSON cannot
carry, always travel as binary data); `"both"` puts `data` and `binary_data_size` on one input,
which the server must refuse. A case's "rest_compression" sends the body with that
Content-Encoding (gzip, or deflate: a zlib stream, as HTTP defines it) and the Accept-Encoding it
names, and the answer must come back with the expected Content-Encoding; "system_shared_memory"
puts every input and output in one /dev/shm region registered over REST for the call (same host
only; `shm_infer`). An error case passes when the HTTP status is the REST status of
the case's gRPC code (REST_STATUS, the KServe/Triton convention: NOT_FOUND 404,
INVALID_ARGUMENT 400, ...) and the `{"error": ...}` message names what the case says; a health
answer is its HTTP status (200 true, 4xx false) whatever its body (`_live`). Cases with no REST
form (streams, CUDA shared memory RPCs) are N/A with the reason (`not_applicable`).
"""

from __future__ import annotations

import gzip
import http.client
import json
import math
import os
import ssl
import uuid
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np

from jaxport_conformance import suite

LABEL = "python-rest"
#: The REST (HTTP) status of each gRPC status code a case may expect: KServe's and Triton's
#: REST conventions (google.rpc.Code's HTTP mapping). The runner's oracle, not the server's.
REST_STATUS = {
    "INVALID_ARGUMENT": 400, "FAILED_PRECONDITION": 400, "OUT_OF_RANGE": 400,
    "UNAUTHENTICATED": 401, "PERMISSION_DENIED": 403, "NOT_FOUND": 404,
    "ALREADY_EXISTS": 409, "RESOURCE_EXHAUSTED": 429, "INTERNAL": 500,
    "UNIMPLEMENTED": 501, "UNAVAILABLE": 503, "DEADLINE_EXCEEDED": 504,
}
#: RPCs with a REST endpoint; the others are N/A with this reason.
REST_RPCS = ("ServerLive", "ServerReady", "ModelReady", "ServerMetadata", "ModelMetadata",
             "ModelInfer")
NO_REST = {
    "ModelStreamInfer": "streams have no REST form (gRPC only)",
}
JSON_UNSAFE = ("FP16", "BF16")  # no JSON form (Triton's rule): always binary data


def json_unsafe(datatype: str, data: bytes) -> bool:
    """A tensor JSON cannot carry: FP16/BF16, or floats holding NaN or +-inf (RFC 8259 numbers
    have neither); it travels as binary data."""
    if datatype in JSON_UNSAFE:
        return True
    if datatype not in suite.FLOATS:
        return False
    row = suite.datatype(datatype)
    usable = len(data) // row.itemsize * row.itemsize
    return not np.isfinite(np.frombuffer(data[:usable], dtype=row.numpy)).all()
#: HTTP content codings the runner writes and reads (deflate is the zlib format, RFC 9110).
CODINGS = {"gzip": (gzip.compress, gzip.decompress), "deflate": (zlib.compress, zlib.decompress)}
SHM_DIR = Path("/dev/shm")
SHM_ALIGN = 64  # each tensor's offset in the region


class RestError(Exception):
    """A non-2xx REST answer: HTTP status and the body's "error" message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(f"HTTP {status}: {message}")
        self.status, self.message = status, message

    @property
    def code(self) -> str:
        """The gRPC code whose REST status this is ("HTTP <n>" when none or several)."""
        names = [c for c, s in REST_STATUS.items() if s == self.status]
        preferred = {400: "INVALID_ARGUMENT"}
        return preferred.get(self.status, names[0] if len(names) == 1 else f"HTTP {self.status}")


# --- the REST client (standard library only) -------------------------------------------------


@dataclass
class RestClient:
    """One server: host:port, optional TLS context, optional bearer token."""

    url: str
    context: ssl.SSLContext | None = None
    token: str | None = None
    timeout: float = suite.CALL_TIMEOUT_S

    def request(self, method: str, path: str, body: bytes | None = None,
                headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
        """One HTTP request on a fresh connection (thread-safe): status, headers, body."""
        host, _, port = self.url.rpartition(":")
        conn: http.client.HTTPConnection
        if self.context is not None:
            conn = http.client.HTTPSConnection(host, int(port), timeout=self.timeout,
                                               context=self.context)
        else:
            conn = http.client.HTTPConnection(host, int(port), timeout=self.timeout)
        hdrs = dict(headers or {})
        if self.token:
            hdrs["Authorization"] = f"Bearer {self.token}"
        try:
            conn.request(method, path, body=body, headers=hdrs)
            resp = conn.getresponse()
            data = resp.read()
            return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
        finally:
            conn.close()

    def post_json(self, path: str, doc: dict[str, Any]) -> None:
        """POST a JSON body whose answer is empty; RestError unless 200."""
        status, _, data = self.request("POST", path, json.dumps(doc).encode(),
                                       {"Content-Type": "application/json"})
        if status != 200:
            raise RestError(status, error_message(parse_json(data), data))

    def get_json(self, path: str, ok: tuple[int, ...] = (200,)) -> tuple[int, Any]:
        """GET a JSON answer; RestError unless the status is in `ok`."""
        status, _, data = self.request("GET", path)
        body = json.loads(data) if data else None
        if status not in ok:
            raise RestError(status, error_message(body, data))
        return status, body


def parse_json(data: bytes) -> Any:
    """A body as JSON, or None when it is not JSON (an error answer's body)."""
    try:
        return json.loads(data)
    except ValueError:
        return None


def coding(name: str) -> tuple[Any, Any]:
    """(compress, decompress) of an HTTP content coding; ValueError naming an unknown one."""
    if name not in CODINGS:
        raise ValueError(f"content coding {name!r} is not one of {sorted(CODINGS)}")
    return CODINGS[name]


def error_message(body: Any, raw: bytes) -> str:
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return body["error"]
    return f"(no JSON error body) {raw[:200]!r}"


def model_path(model: str, version: str = "") -> str:
    path = f"/v2/models/{quote(model, safe='')}"
    return path + (f"/versions/{quote(version, safe='')}" if version else "")


def json_data(datatype: str, data: bytes) -> list[Any]:
    """Tensor bytes as a flat JSON array (BYTES elements are length-prefixed, sent as text)."""
    if datatype == "BYTES":
        return [e.decode("utf-8") for e in suite.split_bytes_elements(data)]
    row = suite.datatype(datatype)
    usable = len(data) // row.itemsize * row.itemsize  # a malformed case: send what fits
    values = np.frombuffer(data[:usable], dtype=row.numpy).tolist()
    return values


def encode_infer(inputs: list[tuple[str, str, list[int], bytes]], *, binary_inputs: bool,
                 outputs: list[dict[str, Any]] | None = None, request_id: str = "",
                 binary_outputs: bool = False, both: bool = False,
                 parameters: dict[str, Any] | None = None) -> tuple[bytes, dict[str, str]]:
    """A REST infer body and its headers. Each input is (name, datatype, shape, bytes);
    `binary_inputs` sends them as binary data (FP16/BF16 always are), else as JSON data;
    `both` gives every input both forms (a deliberately invalid request)."""
    doc: dict[str, Any] = {}
    if request_id:
        doc["id"] = request_id
    params = dict(parameters or {})
    if binary_outputs:
        params["binary_data_output"] = True
    if params:
        doc["parameters"] = params
    blobs = []
    doc["inputs"] = []
    for name, datatype, shape, data in inputs:
        tensor: dict[str, Any] = {"name": name, "shape": list(shape), "datatype": datatype}
        as_binary = binary_inputs or json_unsafe(datatype, data) or both
        if as_binary:
            tensor["parameters"] = {"binary_data_size": len(data)}
            blobs.append(data)
        if not as_binary or both:
            tensor["data"] = json_data(datatype, data)
        doc["inputs"].append(tensor)
    if outputs:
        doc["outputs"] = outputs
    header = json.dumps(doc).encode()
    headers = {"Content-Type": "application/json"}
    if blobs:
        headers = {"Content-Type": "application/octet-stream",
                   "Inference-Header-Content-Length": str(len(header))}
    return header + b"".join(blobs), headers


def decode_infer(headers: dict[str, str], body: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """(response JSON, {output name: suite.Decoded}) of a 200 infer answer (None for an output
    left in shared memory)."""
    length = headers.get("inference-header-content-length")
    split = int(length) if length is not None else len(body)
    doc = json.loads(body[:split])
    blob = memoryview(body)[split:]
    arrays: dict[str, Any] = {}
    offset = 0
    for out in doc.get("outputs", []):
        shape = list(out["shape"])
        params = out.get("parameters") or {}
        if "binary_data_size" in params:
            n = int(params["binary_data_size"])
            raw = bytes(blob[offset:offset + n])
            offset += n
            if out["datatype"] == "BYTES":
                arrays[out["name"]] = suite.Decoded(
                    "BYTES", suite.object_array(suite.split_bytes_elements(raw), shape))
            else:
                arrays[out["name"]] = suite.Decoded(
                    out["datatype"], suite.as_values(out["datatype"], shape, raw))
        elif "data" in out:
            if out["datatype"] == "BYTES":
                arrays[out["name"]] = suite.Decoded(
                    "BYTES", suite.object_array([s.encode("utf-8") for s in out["data"]], shape))
            else:
                row = suite.datatype(out["datatype"])
                arrays[out["name"]] = suite.Decoded(
                    out["datatype"], np.array(out["data"], dtype=row.numpy).reshape(shape))
        else:
            arrays[out["name"]] = None  # in shared memory: nothing in the answer
    if offset != len(blob):
        raise suite.CaseFailure(f"{len(blob)} bytes of binary output data, outputs claim "
                                f"{offset}")
    return doc, arrays


# --- running the cases -----------------------------------------------------------------------


@dataclass
class RestRunner:
    """Runs cases against one REST endpoint."""

    client: RestClient

    def run(self, case: dict[str, Any]) -> None:
        """Raise CaseFailure (or any error) unless the server answers as the case expects (or
        as one of its alternatives: suite.judge)."""
        suite.judge(self._run_one, case)

    def _run_one(self, case: dict[str, Any]) -> None:
        expect = case["expect"]
        if expect["code"] == "OK":
            try:
                getattr(self, "_" + case["rpc"])(case, expect)
            except RestError as exc:
                raise suite.CaseFailure(f"HTTP {exc.status} ({exc.message!r}), expected 200"
                                         ) from exc
            return
        want_status = REST_STATUS[expect["code"]]
        try:
            answer = self.call_only(case)
        except RestError as exc:
            if exc.status != want_status:
                raise suite.CaseFailure(
                    f"HTTP {exc.status} ({exc.message!r}), expected HTTP {want_status} "
                    f"({expect['code']})") from exc
            suite.check_error(expect, expect["code"], exc.message)
            return
        raise suite.CaseFailure(f"call succeeded ({answer}), expected HTTP {want_status} "
                                 f"({expect['code']})")

    def call_only(self, case: dict[str, Any]) -> str:
        """Make the case's call without judging the answer; describe what came back."""
        req = case.get("request", {})
        rpc = case["rpc"]
        if rpc == "ServerLive":
            return f"live={self._live('/v2/health/live', 'live')}"
        if rpc == "ServerReady":
            return f"ready={self._live('/v2/health/ready', 'ready')}"
        if rpc == "ModelReady":
            path = model_path(req["model"], req.get("version", "")) + "/ready"
            return f"ready={self._live(path, 'ready')}"
        if rpc == "ServerMetadata":
            return f"name={self.client.get_json('/v2')[1].get('name')!r}"
        if rpc == "ModelMetadata":
            _, meta = self.client.get_json(model_path(req["model"], req.get("version", "")))
            return f"name={meta.get('name')!r} versions={meta.get('versions')}"
        if rpc == "ModelInfer":
            doc, arrays = self._infer_once(case, req)
            return (f"model {doc.get('model_name')!r} version {doc.get('model_version', '')!r}, "
                    f"outputs {sorted(arrays)}")
        raise ValueError(f"rpc {rpc!r} has no REST form")

    def _live(self, path: str, key: str) -> bool:
        """A health endpoint, as the protocol defines it: "The HTTP response status code
        indicates a boolean result for the health request. A 200 status code indicates true and
        a 4xx status code indicates false" (KServe v2, Health). The body "should be empty"
        there, and the Open Inference Protocol's REST text gives it as {key: $bool}: both are
        accepted (Triton answers an empty body, KServe and jaxport a JSON object); a JSON
        object contradicting the status is a failure. Any other status is a RestError."""
        status, _, data = self.client.request("GET", path)
        if status == 200 or 400 <= status < 500:
            body = parse_json(data) if data.strip() else None
            if isinstance(body, dict) and key in body and body[key] is not (status == 200):
                raise suite.CaseFailure(f"{path}: HTTP {status} with body {body!r}: the "
                                         f"status says {key}={status == 200}")
            return status == 200
        raise RestError(status, error_message(parse_json(data), data))

    def _ServerLive(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        if self._live("/v2/health/live", "live") is not expect["live"]:
            raise suite.CaseFailure(f"live is not {expect['live']}")

    def _ServerReady(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        if self._live("/v2/health/ready", "ready") is not expect["ready"]:
            raise suite.CaseFailure(f"ready is not {expect['ready']}")

    def _ModelReady(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        req = case["request"]
        ready = self._live(model_path(req["model"], req.get("version", "")) + "/ready", "ready")
        if ready is not expect["ready"]:
            raise suite.CaseFailure(f"model ready is {ready}, expected {expect['ready']}")

    def _ServerMetadata(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        _, meta = self.client.get_json("/v2")
        for field_name in expect.get("nonempty", []):
            if not meta.get(field_name):
                raise suite.CaseFailure(f"server metadata field {field_name} is empty")
        missing = set(expect.get("extensions_include", [])) - set(meta.get("extensions", []))
        if missing:
            raise suite.CaseFailure(f"extensions {meta.get('extensions')} lack {sorted(missing)}")

    def _ModelMetadata(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        req = case["request"]
        _, meta = self.client.get_json(model_path(req["model"], req.get("version", "")))
        if meta.get("name") != expect["name"]:
            raise suite.CaseFailure(f"name {meta.get('name')!r}, expected {expect['name']!r}")
        # "versions" is optional ("Optional for servers that don't support versions")
        missing = set(expect.get("versions_include", [])) - set(meta.get("versions") or [])
        if missing:
            raise suite.CaseFailure(f"versions {meta.get('versions')} lack {sorted(missing)}")
        for kind in ("inputs", "outputs"):
            got = [{"name": t["name"], "datatype": t["datatype"], "shape": list(t["shape"])}
                   for t in meta.get(kind, [])]
            if got != expect[kind]:
                raise suite.CaseFailure(f"{kind} {got}, expected {expect[kind]}")

    def _infer_once(self, case: dict[str, Any], req: dict[str, Any]
                    ) -> tuple[dict[str, Any], dict[str, Any]]:
        inputs = [(t["name"], t["datatype"], list(t["shape"]), suite.tensor_bytes(case, t))
                  for t in req["inputs"]]
        raw = req["encoding"] in ("raw", "both")
        expected = case["expect"].get("outputs", [])
        # JSON cannot carry FP16/BF16: ask for binary outputs when one is expected.
        binary_outputs = raw or any(o["datatype"] != "BYTES" and json_unsafe(
            o["datatype"], suite.tensor_bytes(case, o)) for o in expected)
        classification = req.get("classification", {})
        outputs = None
        if req.get("outputs"):
            outputs = []
            for name in req["outputs"]:
                spec: dict[str, Any] = {"name": name}
                if name in classification:
                    spec["parameters"] = {"classification": int(classification[name])}
                outputs.append(spec)
        body, headers = encode_infer(inputs, binary_inputs=raw, outputs=outputs,
                                     request_id=req.get("id", ""),
                                     binary_outputs=binary_outputs,
                                     both=req["encoding"] == "both")
        compression = case.get("rest_compression")
        if compression:
            body = coding(compression["content_encoding"])[0](body)
            headers = {**headers, "Content-Encoding": compression["content_encoding"],
                       "Accept-Encoding": compression["accept_encoding"]}
        status, rheaders, data = self.client.request(
            "POST", model_path(req["model"], req.get("version", "")) + "/infer", body, headers)
        if status != 200:
            raise RestError(status, error_message(parse_json(data), data))
        if compression:
            data = decompressed(compression, rheaders, data)
        return decode_infer(rheaders, data)

    def _ModelInfer(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        if case.get("system_shared_memory"):
            self.shm_infer(case, expect)
            return
        n = int(case.get("parallel", 1))
        with ThreadPoolExecutor(max_workers=n) as pool:
            results = list(pool.map(lambda _: self._infer_once(case, case["request"]), range(n)))
        for doc, arrays in results:
            suite.compare_outputs(case, expect, arrays, doc.get("id", ""))
            for key in ("model_name", "model_version"):
                got = doc.get(key, "")
                if key in expect and got != expect[key]:
                    raise suite.CaseFailure(f"response {key} {got!r}, expected {expect[key]!r}")


    def shm_infer(self, case: dict[str, Any], expect: dict[str, Any]) -> None:
        """Triton's system shared memory over REST: one new /dev/shm object holding every input
        and room for every expected output (each at a SHM_ALIGN offset), registered as a region;
        the infer names the region, byte size and offset of each tensor; the outputs are read
        from the region and compared; the region is unregistered (and must leave the status
        list) and the object removed, whatever happened."""
        req = case["request"]
        tensors = [(t["name"], suite.tensor_bytes(case, t)) for t in req["inputs"]]
        tensors += [(o["name"], bytes(math.prod(o["shape"])
                                      * suite.datatype(o["datatype"]).itemsize))
                    for o in expect["outputs"]]
        offsets, size = [], 0
        for _, data in tensors:
            offsets.append(size)
            size += -(-len(data) // SHM_ALIGN) * SHM_ALIGN
        token = f"{os.getpid()}_{uuid.uuid4().hex[:12]}"
        region, key = f"conformance_{token}", f"jaxport_conformance_{token}"
        path = SHM_DIR / key
        n_in = len(req["inputs"])
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        registered = False
        try:
            os.ftruncate(fd, size)
            for (_, data), offset in zip(tensors[:n_in], offsets, strict=False):
                os.pwrite(fd, data, offset)
            region_path = f"/v2/systemsharedmemory/region/{quote(region, safe='')}"
            self.client.post_json(region_path + "/register",
                                  {"key": "/" + key, "offset": 0, "byte_size": size})
            registered = True

            def place(i: int) -> dict[str, Any]:
                return {"shared_memory_region": region,
                        "shared_memory_byte_size": len(tensors[i][1]),
                        "shared_memory_offset": offsets[i]}
            doc = {"inputs": [{"name": t["name"], "datatype": t["datatype"],
                               "shape": list(t["shape"]), "parameters": place(i)}
                              for i, t in enumerate(req["inputs"])],
                   "outputs": [{"name": o["name"], "parameters": place(n_in + i)}
                               for i, o in enumerate(expect["outputs"])]}
            status, rheaders, data = self.client.request(
                "POST", model_path(req["model"], req.get("version", "")) + "/infer",
                json.dumps(doc).encode(), {"Content-Type": "application/json"})
            if status != 200:
                raise RestError(status, error_message(parse_json(data), data))
            answer, arrays = decode_infer(rheaders, data)
            not_in_region = sorted(k for k, v in arrays.items() if v is not None)
            if not_in_region:
                raise suite.CaseFailure(f"outputs {not_in_region} came back in the answer, "
                                         f"expected them in shared memory region {region!r}")
            placed = {name: i for i, (name, _) in enumerate(tensors) if i >= n_in}
            outputs: dict[str, Any] = {}
            for out in answer.get("outputs", []):
                if out["name"] not in placed:  # not requested: compare_outputs names it
                    outputs[out["name"]] = None
                    continue
                i = placed[out["name"]]
                raw = os.pread(fd, len(tensors[i][1]), offsets[i])
                outputs[out["name"]] = suite.Decoded(
                    out["datatype"], suite.as_values(out["datatype"], list(out["shape"]), raw))
            suite.compare_outputs(case, expect, outputs, answer.get("id", ""))
            self.client.post_json(region_path + "/unregister", {})
            registered = False
            _, listed = self.client.get_json("/v2/systemsharedmemory/status")
            if any(r.get("name") == region for r in listed or []):
                raise suite.CaseFailure(f"region {region!r} still listed after unregister: "
                                         f"{listed!r}")
        finally:
            if registered:  # the case failed midway: leave the server as it was
                try:
                    self.client.post_json(
                        f"/v2/systemsharedmemory/region/{quote(region, safe='')}/unregister", {})
                except (RestError, OSError):
                    pass
            os.close(fd)
            path.unlink(missing_ok=True)


def decompressed(compression: dict[str, str], headers: dict[str, str], data: bytes) -> bytes:
    """A compressed case's answer body, decoded; CaseFailure unless its Content-Encoding is the
    one the case expects for its Accept-Encoding."""
    want = compression["expect_content_encoding"]
    got = headers.get("content-encoding", "(none)")
    if got != want:
        raise suite.CaseFailure(f"answer Content-Encoding {got!r} to Accept-Encoding "
                                f"{compression['accept_encoding']!r}, expected {want!r}")
    try:
        return coding(want)[1](data)
    except (OSError, zlib.error, EOFError) as exc:
        raise suite.CaseFailure(f"answer body is not {want} data: {exc}") from exc


def transport_requires(case: dict[str, Any]) -> list[str]:
    """What the REST form of a case needs beyond its own "requires": Triton's binary tensor data
    extension (feature binary-data) when it sends raw contents ("raw"/"both") or carries FP16 or
    BF16 or non-finite floats, which JSON cannot. KServe v2's REST protocol is JSON only."""
    if case["rpc"] != "ModelInfer":
        return []
    req = case.get("request", {})
    tensors = [*req.get("inputs", []), *case["expect"].get("outputs", [])]
    binary = ((req.get("encoding") in ("raw", "both") and not case.get("system_shared_memory"))
              or any(t.get("datatype") not in (None, "BYTES")
                     and json_unsafe(t["datatype"], suite.tensor_bytes(case, t))
                     for t in tensors))
    return ["binary-data"] if binary else []


def not_applicable(case: dict[str, Any]) -> str | None:
    """Why a case has no REST meaning, or None."""
    rpc = case["rpc"]
    if rpc in REST_RPCS:
        return None
    return NO_REST.get(rpc, f"{rpc} has no REST endpoint here (gRPC only)")


def ssl_context(ca: Path | None, cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    if not (ca or cert):
        return None
    context = ssl.create_default_context(cafile=str(ca) if ca else None)
    if cert:
        context.load_cert_chain(str(cert), str(key))
    return context
