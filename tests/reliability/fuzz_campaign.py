"""Hostile-input fuzz campaign against a live bridge: every RPC, streams, shared memory and
repository control, from several threads, with valid requests interleaved and checked.

    make fuzz                                   # 10,000 cases against `jaxport serve`
    .venv/bin/python tests/reliability/fuzz_campaign.py --cases 10000 --threads 4 --seed 7

`tests/reliability/test_fuzz_campaign.py` runs a few hundred cases of the same campaign as
part of the normal test suite.

What every case must satisfy (`Violation` otherwise, naming the seed, thread and case):
- no UNKNOWN and no INTERNAL, except grpc's own answer to bytes that do not parse
  (INTERNAL "Exception deserializing request!", also ending a stream carrying such bytes; from
  the native front's own services, grpc-go's "grpc: error unmarshalling request: ...");
- no DEADLINE_EXCEEDED: every call has a generous deadline (`DEADLINE_S`) it must not hit;
- valid requests interleaved with the hostile ones (unary, inside hostile streams, through
  shared memory) get exactly the right answer;
- inside streams, one response per request, in order, errors never INTERNAL/UNKNOWN.
After the campaign: the server's RSS growth since the warm-up (front and workers together) is
within `--rss-bound-mib`,
its log holds no ERROR record (an ERROR is a bug in our code), hostile traffic was counted
by code in `jaxport_grpc_requests_total`, and SIGTERM ends the process with status 0 ("stopped",
cut 0); how long that took is printed, not asserted (a hang fails after EXIT_BOUND_S).

Seeds: thread `t` of campaign seed `S` draws everything from
`random.Random((S * 10 + phase) * 1000 + t)` (phase 0 warm-up, 1 the rest) and from
hypothesis examples generated with seed `S`; a failure prints `--seed S` and the case, so
`--seed S --cases N --threads T` replays the same payloads.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import mmap
import os
import random
import signal
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

_HERE = Path(__file__).resolve().parent
for _p in (_HERE, _HERE.parent):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import grpc  # noqa: E402
import numpy as np  # noqa: E402
from grpc_health.v1 import health_pb2  # noqa: E402
from hostile import TensorSpec, hostile_requests, raw_messages  # noqa: E402
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb  # noqa: E402
from live import fuzzy_request, output, stub  # noqa: E402
from rel_models import fuzzy_expected  # noqa: E402

SERVICE = "/inference.GRPCInferenceService/"
DESERIALIZE_FAILED = "Exception deserializing request!"
#: grpc-go's own answers to bytes that do not parse (the native front's health and reflection
#: services; its inference calls are parsed by the workers, which answer DESERIALIZE_FAILED).
GO_DESERIALIZE_FAILED = ("grpc: error unmarshalling request: ",
                         "grpc: failed to unmarshal the received message: ")
DEADLINE_S = 60.0
GRACE_S = 5.0
#: A failure bound for a drain that hangs, not a requirement on how long the exit takes (the
#: machine may be loaded): the exit time is printed.
EXIT_BOUND_S = 120.0
REAL = [TensorSpec("x", "FP32", (2, 3)), TensorSpec("flag", "BOOL", (2,))]
PROTECTED = ("fuzzy", "slow")  # models the valid requests use: never unloaded
SPARE = "spare"  # a copy of fuzzy that repository-control cases load and unload
DEFAULT_RSS_BOUND_MIB = 64

UNARY_METHODS = {
    "ServerLive": pb.ServerLiveRequest, "ServerReady": pb.ServerReadyRequest,
    "ModelReady": pb.ModelReadyRequest, "ServerMetadata": pb.ServerMetadataRequest,
    "ModelMetadata": pb.ModelMetadataRequest, "ModelInfer": pb.ModelInferRequest,
    "ModelConfig": pb.ModelConfigRequest, "ModelStatistics": pb.ModelStatisticsRequest,
    "RepositoryIndex": pb.RepositoryIndexRequest,
    "RepositoryModelLoad": pb.RepositoryModelLoadRequest,
    "RepositoryModelUnload": pb.RepositoryModelUnloadRequest,
    "SystemSharedMemoryStatus": pb.SystemSharedMemoryStatusRequest,
    "SystemSharedMemoryRegister": pb.SystemSharedMemoryRegisterRequest,
    "SystemSharedMemoryUnregister": pb.SystemSharedMemoryUnregisterRequest,
}
OTHER_UNARY = ("/grpc.health.v1.Health/Check",)
OTHER_STREAMS = ("/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",)

HOSTILE_NAMES = (
    "", ".", "..", ".hidden", "../fuzzy", "fuzzy/1", "/etc", "a\x00b", "fu zzy", "fuzzy\n",
    "m" * 256, "m" * 4096, "m" * 100_000, "\u00e9" * 200, "\U0001f600", "con", "-", "~",
    "fuzzy\\..\\x", "%2e%2e", "fuzzy\u200b",
)
HOSTILE_VERSIONS = (
    "9" * 4301, "9" * 20, "\u00b2", "\u0661", "01", "0", "-1", "+1", " 1", "1 ", "1.0",
    "1e3", "0x1", "\uff11", "1\x00", "latest", "../1", "9" * 19, "18446744073709551617",
)


class Violation(AssertionError):
    """A case broke the campaign's rules."""


@dataclasses.dataclass
class Stats:
    cases: int = 0
    valid_checked: int = 0
    codes: Counter = dataclasses.field(default_factory=Counter)
    kinds: Counter = dataclasses.field(default_factory=Counter)

    def merge(self, other: Stats) -> None:
        self.cases += other.cases
        self.valid_checked += other.valid_checked
        self.codes.update(other.codes)
        self.kinds.update(other.kinds)


def process_tree(pid: int) -> list[int]:
    """`pid` and its descendants (the native front's workers), from /proc."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in Path(f"/proc/{p}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue  # exited meanwhile
    return out


def rss_and_threads(pid: int) -> tuple[float, int]:
    """VmRSS in MiB and the thread count of `pid` and its descendants together."""
    rss = threads = 0
    for p in process_tree(pid):
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                rss += int(line.split()[1])
            elif line.startswith("Threads:"):
                threads += int(line.split()[1])
    return rss / 1024, threads


def examples(strategy, n: int, seed: int) -> list:
    """`n` examples of a hypothesis strategy, reproducible from `seed`."""
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hseed

    out: list = []

    @hseed(seed)
    @settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def collect(example) -> None:
        out.append(example)

    collect()
    return out


def _code(exc: grpc.RpcError) -> tuple[str, str]:
    return exc.code().name, exc.details() or ""


class Campaign:
    """Threads of hostile cases against one bridge (address, pid, metrics URL)."""

    def __init__(self, bridge, seed: int, threads: int, shm_dir: Path = Path("/dev/shm")):
        self.bridge = bridge
        self.seed = seed
        self.threads = threads
        self.shm_dir = shm_dir
        self.channel = bridge.channel()
        self.stub = stub(self.channel)
        self.structured: list[pb.ModelInferRequest] = []
        self.raw: list[bytes] = []
        self.stop = threading.Event()
        self.errors: list[str] = []
        self._lock = threading.Lock()

    def prepare(self, cases: int) -> None:
        """Hypothesis examples of hostile.py's generators for the whole campaign."""
        n = max(50, min(2000, cases // 4))
        self.structured = examples(hostile_requests("fuzzy", REAL), n, self.seed)
        self.raw = examples(raw_messages(), n, self.seed)

    # -- checks ------------------------------------------------------------------------------

    def _check_status(self, where: str, code: str, details: str, raw: bool) -> None:
        if code in ("UNKNOWN", "DEADLINE_EXCEEDED"):
            raise Violation(f"{where}: {code}: {details[:300]}")
        if code == "INTERNAL" and not (raw and (details == DESERIALIZE_FAILED or
                                                details.startswith(GO_DESERIALIZE_FAILED))):
            raise Violation(f"{where}: INTERNAL: {details[:300]}")
        if code != "OK" and not details and not where.endswith("[health]"):
            raise Violation(f"{where}: {code} without details")

    def unary(self, st: Stats, where: str, method: str, payload, raw: bool = False,
              allowed: tuple[str, ...] | None = None):
        """Call `method` (full name) with a message or bytes; checked status name + response."""
        call = self.channel.unary_unary(
            method, request_serializer=None if isinstance(payload, bytes)
            else type(payload).SerializeToString, response_deserializer=None)
        try:
            response = call(payload, timeout=DEADLINE_S)
            code, details = "OK", ""
        except grpc.RpcError as exc:
            response = None
            code, details = _code(exc)
        self._check_status(where, code, details, raw)
        if allowed is not None and code not in allowed:
            raise Violation(f"{where}: {code} not in {allowed}: {details[:300]}")
        st.codes[code] += 1
        return code, details, response

    def check_valid(self, st: Stats, where: str, rng: random.Random) -> None:
        x = rng.choice([np.float32(-3.5), np.float32(0.25), np.float32(7)]) * np.arange(
            6, dtype=np.float32).reshape(2, 3)
        flag = np.array([rng.random() < 0.5, rng.random() < 0.5])
        resp = self.stub.ModelInfer(fuzzy_request(x, flag, request_id=where), timeout=DEADLINE_S)
        if resp.id != where or not np.array_equal(output(resp), fuzzy_expected(x, flag)):
            raise Violation(f"{where}: valid request answered wrongly: {resp}")
        st.valid_checked += 1

    # -- case kinds ------------------------------------------------------------------------

    def case_structured(self, st, where, rng) -> None:
        req = rng.choice(self.structured)
        self.unary(st, where, SERVICE + "ModelInfer", req,
                   allowed=("OK", "INVALID_ARGUMENT", "NOT_FOUND"))

    def _raw_payload(self, rng: random.Random) -> bytes:
        r = rng.random()
        if r < 0.5:
            return rng.choice(self.raw)
        if r < 0.8:
            return rng.randbytes(rng.randrange(0, 256))
        return bytes([rng.choice([0x0A, 0x12, 0x1A, 0x22, 0x2A, 0x32, 0x3A, 0x08, 0x10])]) + \
            rng.randbytes(rng.randrange(0, 32))

    def case_raw_unary(self, st, where, rng) -> None:
        name = rng.choice([*UNARY_METHODS, *OTHER_UNARY])
        payload = self._raw_payload(rng)
        method = name if name.startswith("/") else SERVICE + name
        cls = UNARY_METHODS.get(name)
        if cls is not None and name in ("SystemSharedMemoryUnregister", "RepositoryModelUnload",
                                        "RepositoryModelLoad"):
            try:
                parsed = cls.FromString(payload)
            except Exception:
                parsed = None
            # Bytes that happen to parse into "unregister every region" or naming a model the
            # valid requests use would break the other threads' valid cases: not hostile, rude.
            target = getattr(parsed, "name", None) if name.startswith("System") else \
                getattr(parsed, "model_name", None)
            if parsed is not None and (target == "" if name.startswith("System")
                                       else target in PROTECTED):
                payload = b"\xff" + payload
        self.unary(st, where, method, payload, raw=True)

    def case_raw_stream(self, st, where, rng) -> None:
        method = rng.choice([SERVICE + "ModelStreamInfer", *OTHER_STREAMS])
        good = fuzzy_request(request_id="g").SerializeToString()
        msgs = [good if rng.random() < 0.4 and "Stream" in method else self._raw_payload(rng)
                for _ in range(rng.randrange(1, 5))]
        call = self.channel.stream_stream(method, request_serializer=None,
                                          response_deserializer=None)
        try:
            n = len(list(call(iter(msgs), timeout=DEADLINE_S)))
            code, details = "OK", ""
        except grpc.RpcError as exc:
            code, details = _code(exc)
            n = -1
        self._check_status(where, code, details, raw=True)
        if n > len(msgs) and "Stream" in method:
            raise Violation(f"{where}: {n} responses to {len(msgs)} messages")
        st.codes[code] += 1

    def case_names(self, st, where, rng) -> None:
        name = rng.choice([*HOSTILE_NAMES, "fuzzy", "fuzzy", "ghost",
                           "".join(chr(rng.randrange(1, 0x3000)) for _ in range(rng.randrange(8)))])
        version = rng.choice([*HOSTILE_VERSIONS, "", "1", "2"])
        what = rng.choice(["infer", "metadata", "config", "ready", "statistics", "load",
                           "unload", "stream"])
        ok = ("OK", "NOT_FOUND", "INVALID_ARGUMENT", "UNAVAILABLE", "FAILED_PRECONDITION")
        if what == "infer":
            req = fuzzy_request(request_id=where)
            req.model_name, req.model_version = name, version
            self.unary(st, where, SERVICE + "ModelInfer", req, allowed=ok)
        elif what == "metadata":
            self.unary(st, where, SERVICE + "ModelMetadata",
                       pb.ModelMetadataRequest(name=name, version=version), allowed=ok)
        elif what == "config":
            self.unary(st, where, SERVICE + "ModelConfig",
                       pb.ModelConfigRequest(name=name, version=version), allowed=ok)
        elif what == "ready":
            self.unary(st, where, SERVICE + "ModelReady",
                       pb.ModelReadyRequest(name=name, version=version), allowed=ok)
        elif what == "statistics":
            self.unary(st, where, SERVICE + "ModelStatistics",
                       pb.ModelStatisticsRequest(name=name, version=version), allowed=ok)
        elif what in ("load", "unload") and name not in PROTECTED:
            cls = pb.RepositoryModelLoadRequest if what == "load" else \
                pb.RepositoryModelUnloadRequest
            method = "RepositoryModelLoad" if what == "load" else "RepositoryModelUnload"
            self.unary(st, where, SERVICE + method, cls(model_name=name), allowed=ok)
        else:
            req = fuzzy_request(request_id=where)
            req.model_name, req.model_version = name, version
            good = fuzzy_request(request_id=where + "/good")
            responses = list(self.stub.ModelStreamInfer(iter([req, good]), timeout=DEADLINE_S))
            self._check_stream(where, [req, good], responses)
            st.codes["stream"] += 1

    def _check_stream(self, where: str, reqs: list, responses: list) -> None:
        if len(responses) != len(reqs):
            raise Violation(f"{where}: {len(responses)} responses to {len(reqs)} requests")
        for req, r in zip(reqs, responses, strict=True):
            if r.infer_response.id != req.id:
                raise Violation(f"{where}: response id {r.infer_response.id!r} for {req.id!r}")
            if r.error_message:
                code = r.error_message.split(":", 1)[0]
                if code in ("INTERNAL", "UNKNOWN", "DEADLINE_EXCEEDED") or req.id.endswith(
                        "/good"):
                    raise Violation(f"{where}: in-stream {req.id}: {r.error_message[:300]}")
            elif req.model_name == "fuzzy" and req.id.endswith("/good"):
                if not np.array_equal(output(r.infer_response),
                                      fuzzy_expected(*_inputs_of(req))):
                    raise Violation(f"{where}: valid request in a stream answered wrongly")

    def case_stream(self, st, where, rng) -> None:
        """A stream of hostile and valid requests: complete, abandoned, or never-ending."""
        reqs: list[pb.ModelInferRequest] = []
        for i in range(rng.randrange(1, 8)):
            if rng.random() < 0.4:
                x = np.full((2, 3), rng.randrange(-5, 5), np.float32)
                req = fuzzy_request(x, np.array([True, False]), request_id=f"{where}/{i}/good")
            else:
                req = pb.ModelInferRequest()
                req.CopyFrom(rng.choice(self.structured))
                req.id = f"{where}/{i}"
            reqs.append(req)
        mode = rng.choice(["complete", "complete", "cancel", "never_ending"])
        if mode == "complete":
            responses = list(self.stub.ModelStreamInfer(iter(reqs), timeout=DEADLINE_S))
            self._check_stream(where, reqs, responses)
            st.codes["stream_ok"] += 1
            return
        release = threading.Event()

        def requests() -> Iterator[pb.ModelInferRequest]:
            yield from reqs
            if mode == "never_ending":
                release.wait(DEADLINE_S)  # the client never half-closes: it cancels instead

        call = self.stub.ModelStreamInfer(requests(), timeout=DEADLINE_S)
        keep = rng.randrange(0, len(reqs) + 1) if mode == "cancel" else len(reqs)
        got = []
        try:
            for r in call if keep else ():
                got.append(r)
                if len(got) >= keep:
                    break
            call.cancel()
        finally:
            release.set()
        self._check_stream(where, reqs[:len(got)], got)
        st.codes[f"stream_{mode}"] += 1

    def case_shm(self, st, where, rng, tid: int) -> None:
        """Shared-memory abuse, or a valid round trip through this thread's own regions."""
        ok = ("OK", "NOT_FOUND", "INVALID_ARGUMENT", "ALREADY_EXISTS", "FAILED_PRECONDITION",
              "RESOURCE_EXHAUSTED")
        r = rng.random()
        if r < 0.5:
            name = rng.choice(["", "x", f"t{tid}-in", "../r", "r" * 300, "\u00e9"])
            key = rng.choice(["", "/", "/..", "../etc/passwd", "/nope", "/" + "k" * 300,
                              "/a/b", "\x00", f"/jaxport-fuzz-{os.getpid()}-{tid}-in",
                              "/dev/shm/x", "."])
            offset = rng.choice([0, 1, 2**62, 2**63, 2**64 - 1, 24])  # uint64 fields
            size = rng.choice([0, 1, 24, 2**40, 2**63 + 5, 2**64 - 1])
            self.unary(st, where, SERVICE + "SystemSharedMemoryRegister",
                       pb.SystemSharedMemoryRegisterRequest(name=f"{name}-{tid}-h", key=key,
                                                            offset=offset, byte_size=size),
                       allowed=ok)
            self.unary(st, where, SERVICE + "SystemSharedMemoryUnregister",
                       pb.SystemSharedMemoryUnregisterRequest(name=f"{name}-{tid}-h"),
                       allowed=ok)
        elif r < 0.7:
            self.unary(st, where, SERVICE + "SystemSharedMemoryStatus",
                       pb.SystemSharedMemoryStatusRequest(
                           name=rng.choice(["", "ghost", "x" * 999])),
                       allowed=ok)
        elif r < 0.85:
            # An inference naming regions that do not exist or ranges beyond them.
            req = fuzzy_request(request_id=where)
            t = req.inputs[0]
            t.parameters["shared_memory_region"].string_param = rng.choice(
                ["ghost", f"t{tid}-in", ""])
            t.parameters["shared_memory_byte_size"].int64_param = rng.choice([24, -1, 2**62, 0])
            t.parameters["shared_memory_offset"].int64_param = rng.choice([0, 2**62, -8])
            del req.raw_input_contents[0]
            self.unary(st, where, SERVICE + "ModelInfer", req, allowed=ok)
        else:
            self._shm_round_trip(st, where, rng, tid)

    def _shm_round_trip(self, st, where, rng, tid: int) -> None:
        key = f"jaxport-fuzz-{os.getpid()}-{tid}"
        x = np.full((2, 3), rng.randrange(-9, 9), np.float32)
        flag = np.array([rng.random() < 0.5, True])
        path = self.shm_dir / key
        with open(path, "w+b") as f:
            f.truncate(48)
            with mmap.mmap(f.fileno(), 48) as m:
                m[:24] = x.astype("<f4").tobytes()
                for name, off in ((f"t{tid}-in", 0), (f"t{tid}-out", 24)):
                    self.stub.SystemSharedMemoryRegister(pb.SystemSharedMemoryRegisterRequest(
                        name=name, key="/" + key, offset=off, byte_size=24), timeout=DEADLINE_S)
                try:
                    req = fuzzy_request(x, flag, request_id=where)
                    t = req.inputs[0]
                    t.parameters["shared_memory_region"].string_param = f"t{tid}-in"
                    t.parameters["shared_memory_byte_size"].int64_param = 24
                    del req.raw_input_contents[0]
                    out = req.outputs.add(name="y")
                    out.parameters["shared_memory_region"].string_param = f"t{tid}-out"
                    out.parameters["shared_memory_byte_size"].int64_param = 24
                    self.stub.ModelInfer(req, timeout=DEADLINE_S)
                    got = np.frombuffer(m[24:48], "<f4").reshape(2, 3)
                    if not np.array_equal(got, fuzzy_expected(x, flag)):
                        raise Violation(f"{where}: shared-memory output wrong: {got}")
                    st.valid_checked += 1
                finally:
                    for name in (f"t{tid}-in", f"t{tid}-out"):
                        self.stub.SystemSharedMemoryUnregister(
                            pb.SystemSharedMemoryUnregisterRequest(name=name), timeout=DEADLINE_S)
        path.unlink(missing_ok=True)

    def case_repository(self, st, where, rng) -> None:
        ok = ("OK", "NOT_FOUND", "INVALID_ARGUMENT", "UNAVAILABLE", "FAILED_PRECONDITION")
        r = rng.random()
        if r < 0.1:  # a load compiles the model: rarer than the rest
            self.unary(st, where, SERVICE + "RepositoryModelLoad",
                       pb.RepositoryModelLoadRequest(model_name=SPARE), allowed=ok)
        elif r < 0.3:
            self.unary(st, where, SERVICE + "RepositoryModelUnload",
                       pb.RepositoryModelUnloadRequest(model_name=SPARE), allowed=ok)
        elif r < 0.6:
            req = pb.RepositoryModelLoadRequest(model_name=SPARE)
            req.parameters["config"].string_param = "{}"
            self.unary(st, where, SERVICE + "RepositoryModelLoad", req,
                       allowed=("INVALID_ARGUMENT",))
        elif r < 0.7:
            self.unary(st, where, SERVICE + "RepositoryIndex",
                       pb.RepositoryIndexRequest(repository_name=rng.choice(["", "other"]),
                                                 ready=rng.random() < 0.5), allowed=ok)
        else:
            req = fuzzy_request(request_id=where)
            req.model_name = SPARE
            self.unary(st, where, SERVICE + "ModelInfer", req, allowed=ok)

    def case_metadata(self, st, where, rng) -> None:
        name, cls = rng.choice([("ServerLive", pb.ServerLiveRequest()),
                                ("ServerReady", pb.ServerReadyRequest()),
                                ("ServerMetadata", pb.ServerMetadataRequest()),
                                ("ModelMetadata", pb.ModelMetadataRequest(name="fuzzy")),
                                ("ModelConfig", pb.ModelConfigRequest(name="fuzzy")),
                                ("ModelStatistics", pb.ModelStatisticsRequest()),
                                ("ModelReady", pb.ModelReadyRequest(name="fuzzy", version="1"))])
        self.unary(st, where, SERVICE + name, cls, allowed=("OK",))
        health = health_pb2.HealthCheckRequest(service=rng.choice(["", "nope"]))
        # grpc's health service answers an unknown service NOT_FOUND without details.
        self.unary(st, where + " [health]", OTHER_UNARY[0], health, allowed=("OK", "NOT_FOUND"))

    def case_big(self, st, where, rng) -> None:
        """A large message (256 KiB to 4 MiB): a tensor of the wrong size, or bytes as the
        whole message of some RPC (what grows a server's heap, see docs/security.md)."""
        size = rng.choice([1 << 18, 1 << 20, 2 << 20, 4 << 20])
        if rng.random() < 0.6:
            req = fuzzy_request(request_id=where)
            req.raw_input_contents[0] = rng.randbytes(64) * (size // 64)
            self.unary(st, where, SERVICE + "ModelInfer", req, allowed=("INVALID_ARGUMENT",))
        else:
            method = SERVICE + rng.choice(["ModelInfer", "ModelMetadata", "RepositoryIndex"])
            self.unary(st, where, method, b"\x0a\xff" + rng.randbytes(64) * (size // 64),
                       raw=True)

    KINDS = (
        ("structured", 20), ("raw_unary", 20), ("raw_stream", 6), ("names", 16),
        ("stream", 10), ("shm", 10), ("repository", 6), ("metadata", 4), ("valid", 8),
        ("big", 2),
    )

    # -- driving -----------------------------------------------------------------------------

    def worker(self, tid: int, cases: int, st: Stats, progress: Callable[[int], None],
               phase: int) -> None:
        rng = random.Random((self.seed * 10 + phase) * 1000 + tid)
        kinds = [k for k, _ in self.KINDS]
        weights = [w for _, w in self.KINDS]
        for i in range(cases):
            if self.stop.is_set():
                return
            kind = rng.choices(kinds, weights)[0]
            where = f"seed {self.seed} phase {phase} thread {tid} case {i} ({kind})"
            try:
                if kind == "valid":
                    self.check_valid(st, where, rng)
                elif kind == "shm":
                    self.case_shm(st, where, rng, tid)
                else:
                    getattr(self, f"case_{kind}")(st, where, rng)
                if i % 5 == 4:
                    self.check_valid(st, where + " [interleaved]", rng)
            except Violation as exc:
                self._fail(str(exc))
                return
            except grpc.RpcError as exc:
                self._fail(f"{where}: valid call failed: {exc.code().name}: {exc.details()}")
                return
            except Exception as exc:  # the campaign's own bug: still a failure, with the case
                self._fail(f"{where}: {type(exc).__name__}: {exc}")
                return
            st.cases += 1
            st.kinds[kind] += 1
            progress(1)

    def _fail(self, message: str) -> None:
        with self._lock:
            self.errors.append(message)
        self.stop.set()

    def run(self, cases: int, on_progress: Callable[[int], None] = lambda n: None,
            phase: int = 0) -> Stats:
        """`cases` cases spread over the threads; phase 0 = warm-up, 1 = the campaign."""
        per = [cases // self.threads + (t < cases % self.threads) for t in range(self.threads)]
        stats = [Stats() for _ in range(self.threads)]
        threads = [threading.Thread(target=self.worker, name=f"fuzz-{t}",
                                    args=(t, per[t], stats[t], on_progress, phase))
                   for t in range(self.threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        total = Stats()
        for s in stats:
            total.merge(s)
        if not self.errors and total.cases != cases:
            self.errors.append(f"{total.cases} of {cases} cases ran")
        if self.errors:
            raise Violation(f"{len(self.errors)} violation(s); replay with --seed {self.seed} "
                            f"--cases {cases} --threads {self.threads}:\n"
                            + "\n".join(self.errors[:10]))
        return total


def grpc_counts(metrics_url: str) -> dict[tuple[str, str], float]:
    """`jaxport_grpc_requests_total` by (method, code), summed over the native front's
    workers (`worker` label)."""
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("jaxport_grpc_requests_total{"):
            labels = dict(kv.split("=", 1) for kv in line[line.index("{") + 1:
                                                           line.index("}")].split(","))
            key = (labels["method"].strip('"'), labels["code"].strip('"'))
            out[key] = out.get(key, 0.0) + float(line.rsplit(" ", 1)[1])
    return out


@dataclasses.dataclass
class Report:
    seed: int
    cases: int
    threads: int
    stats: Stats
    rss_start: float
    rss_warm: float
    rss_end: float
    threads_start: int
    threads_end: int
    rss_bound: float
    seconds: float
    exit_status: int | None
    exit_seconds: float

    def lines(self) -> list[str]:
        return [
            f"fuzz: seed {self.seed}, {self.stats.cases} cases on {self.threads} threads in "
            f"{self.seconds:.0f} s ({self.stats.valid_checked} valid answers checked)",
            f"fuzz: kinds {dict(self.stats.kinds)}",
            f"fuzz: codes {dict(self.stats.codes)}",
            f"fuzz: server RSS start {self.rss_start:.0f} MiB, after warm-up "
            f"{self.rss_warm:.0f} MiB, end {self.rss_end:.0f} MiB (growth since warm-up "
            f"{self.rss_end - self.rss_warm:.0f} MiB, bound {self.rss_bound:.0f} MiB); "
            f"threads {self.threads_start} -> {self.threads_end}",
            f"fuzz: SIGTERM -> exit status {self.exit_status} in {self.exit_seconds:.2f} s "
            f"(grace {GRACE_S:.0f} s; a hang fails after {EXIT_BOUND_S:.0f} s)",
        ]


def make_fuzz_repository(root: Path, artifacts: dict[str, Path]) -> Path:
    import shutil

    for name in ("fuzzy", "slow"):
        shutil.copytree(artifacts[name], root / name / "1")
    shutil.copytree(artifacts["fuzzy"], root / SPARE / "1")
    return root


@contextlib.contextmanager
def fuzz_bridge(repository: Path, extra_env: dict[str, str] | None = None,
                front_binary: Path | None = None):
    """A server as the campaign wants it (`jaxport serve`: the native front and two workers,
    `front_binary` if given): shared memory on, a short grace period."""
    from support.bridge import EXPLICIT, BridgeProcess

    extra = ["--front-binary", str(front_binary)] if front_binary is not None else []
    bridge = BridgeProcess(repository, "--system-shared-memory", "--grace-period-s",
                           str(GRACE_S), *EXPLICIT, *extra, env=extra_env)
    bridge.start()
    try:
        yield bridge
    finally:
        bridge.stop()


def run_campaign(bridge, cases: int, threads: int, seed: int, rss_bound_mib: float,
                 warmup: int | None = None, log: Callable[[str], None] = print) -> Report:
    """The whole campaign on a started `bridge`, then SIGTERM; raises Violation on failure."""
    start = time.monotonic()
    rss_start, threads_start = rss_and_threads(bridge.pid)
    log(f"fuzz: seed {seed}: {cases} cases, {threads} threads; server RSS at start "
        f"{rss_start:.0f} MiB, {threads_start} threads")
    campaign = Campaign(bridge, seed, threads)
    campaign.prepare(cases)
    warmup = min(cases // 10, 1000) if warmup is None else warmup
    stats = Stats()
    if warmup:
        stats.merge(campaign.run(warmup))
    rss_warm, _ = rss_and_threads(bridge.pid)
    log(f"fuzz: after warm-up ({warmup} cases): server RSS {rss_warm:.0f} MiB")
    done = [0]
    step = max(1000, cases // 10)

    def progress(n: int) -> None:
        with campaign._lock:
            done[0] += n
            if done[0] % step == 0:
                rss, nthreads = rss_and_threads(bridge.pid)
                log(f"fuzz: {done[0] + warmup} cases, RSS {rss:.0f} MiB, {nthreads} threads")

    stats.merge(campaign.run(cases - warmup, progress, phase=1))
    rss_end, threads_end = rss_and_threads(bridge.pid)
    counts = grpc_counts(bridge.metrics_url)
    campaign.channel.close()
    seconds = time.monotonic() - start
    # The end: SIGTERM must drain (nothing is in flight) and exit 0.
    t0 = time.monotonic()
    bridge.send_signal(signal.SIGTERM)
    try:
        status = bridge.wait(EXIT_BOUND_S)
    except Exception:
        status = None
    exit_seconds = time.monotonic() - t0
    report = Report(seed, cases, threads, stats, rss_start, rss_warm, rss_end, threads_start,
                    threads_end, rss_bound_mib, seconds, status, exit_seconds)
    for line in report.lines():
        log(line)
    problems = []
    if status != 0:
        problems.append(f"SIGTERM: exit status {status} after {exit_seconds:.1f} s (want 0; "
                        f"no exit within {EXIT_BOUND_S:.0f} s is a hang)")
    records = bridge.log_records()
    # jaxport serve: one record (cut, exit_status); the native front: the front's and each
    # worker's. Every one must be clean.
    stopped = [r for r in records if r.get("msg") == "stopped"]
    if not stopped or any(r.get("cut", 0) != 0 or r.get("exit_status", 0) != 0
                          for r in stopped):
        problems.append(f"no clean 'stopped' record: {stopped}")
    errors = [r for r in records if r.get("level") in ("ERROR", "CRITICAL") or "exc" in r]
    if errors:
        problems.append(f"{len(errors)} ERROR/traceback log records, first: "
                        f"{json.dumps(errors[0])[:1500]}")
    if rss_end - rss_warm > rss_bound_mib:
        problems.append(f"RSS grew {rss_end - rss_warm:.0f} MiB since warm-up "
                        f"(bound {rss_bound_mib:.0f} MiB)")
    undecodable = sum(v for (m, c), v in counts.items() if c == "INTERNAL")
    cancelled = sum(v for (m, c), v in counts.items() if c == "CANCELLED")
    if stats.kinds["raw_unary"] and not undecodable:
        problems.append(f"undecodable requests not counted as INTERNAL: {counts}")
    if stats.codes["stream_cancel"] + stats.codes["stream_never_ending"] and not cancelled:
        problems.append(f"cancelled streams not counted as CANCELLED: {counts}")
    if problems:
        raise Violation(f"seed {seed}: " + "; ".join(problems))
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--seed", type=int, default=None, help="default: random, printed")
    parser.add_argument("--rss-bound-mib", type=float, default=DEFAULT_RSS_BOUND_MIB)
    parser.add_argument("--front-binary", type=Path, default=None,
                        help="the jaxport-front binary (default: the one jaxport serve finds)")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(10**6)
    import tempfile

    import rel_models
    from jaxport.exporter.api import export

    with tempfile.TemporaryDirectory(prefix="jaxport-fuzz-") as tmp:
        artifacts = {}
        for name, (fn, params, inputs) in rel_models.MODELS.items():
            artifacts[name] = Path(tmp) / "artifacts" / name
            export(fn, params, inputs, artifacts[name], quiet=True, goldens=1)
        repo = make_fuzz_repository(Path(tmp) / "repo", artifacts)
        with fuzz_bridge(repo, front_binary=args.front_binary) as bridge:
            try:
                run_campaign(bridge, args.cases, args.threads, seed, args.rss_bound_mib,
                             log=lambda s: print(s, flush=True))
            except Violation as exc:
                print(f"fuzz: FAILED (replay: --seed {seed} --cases {args.cases} --threads "
                      f"{args.threads})\n{exc}", flush=True)
                print(f"fuzz: server log: {bridge.log_path}", flush=True)
                return 1
    print("fuzz: passed", flush=True)
    return 0


def _inputs_of(req: pb.ModelInferRequest) -> tuple[np.ndarray, np.ndarray]:
    x = np.frombuffer(req.raw_input_contents[0], "<f4").reshape(2, 3)
    flag = np.frombuffer(req.raw_input_contents[1], "bool")
    return x, flag


if __name__ == "__main__":
    sys.exit(main())
