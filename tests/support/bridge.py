"""`BridgeProcess`: a REAL `jaxport serve` subprocess for tests, on 127.0.0.1 port 0.

The server binds port 0 (the kernel picks a free port) and reports what it bound in
`--port-file` (JSON `{"grpc_port": N, "metrics_port": M, "pid": P}`); the test reads that file,
never probes for a port. Readiness = the standard gRPC health service answering SERVING, which
the bridge does once its repository finished loading. Stopping is by PID only: SIGTERM, then
SIGKILL after a grace period.

    with BridgeProcess(repo, "--engine", "pjrt") as bridge:
        stub = GRPCInferenceServiceStub(bridge.channel())

Stdout and stderr (JSON-line logs) go to files in `workdir` for `stdout_text()`/`log_text()`.

The server is `jaxport serve` as users run it: the native front (Go, `jaxport-front`) and its
Python execution workers. The front binary is the one `jaxport serve` finds
(`.venv/bin/jaxport-front`, or `--front-binary`/`JAXPORT_FRONT_BINARY`; tests take the one
tests/tiers.py hands over, `support.binaries.path("front")`). Stdout is the front's
(`jaxport serve: ...` lines); stderr carries the JSON-line logs of the front and of its workers.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

__all__ = ["EXPLICIT", "BridgeProcess", "BridgeStartError", "serve_command"]

#: The flags of a test server that loads or unloads models: Triton's explicit model control,
#: every model loaded at the start (`jaxport serve`'s default, mode none, refuses load/unload).
EXPLICIT = ("--model-control-mode", "explicit", "--load-model", "*")

START_TIMEOUT_S = 120.0
MAX_MESSAGE_BYTES = 256 * 1024 * 1024


class BridgeStartError(RuntimeError):
    """The bridge exited or did not become ready; the message carries its log tail."""


def serve_command() -> list[str]:
    """How to run `jaxport serve` from this interpreter's environment."""
    script = Path(sys.executable).parent / "jaxport"
    if script.exists():
        return [str(script), "serve"]
    return [sys.executable, "-m", "jaxport.bridge.cli"]


class BridgeProcess:
    """One `jaxport serve --repository REPO --port 0 --metrics-port 0 ...ARGS` process."""

    def __init__(
        self,
        repository: str | os.PathLike[str],
        *args: str,
        env: Mapping[str, str] | None = None,
        workdir: str | os.PathLike[str] | None = None,
        command: Sequence[str] | None = None,
        start_timeout: float = START_TIMEOUT_S,
    ) -> None:
        #: A URL (file://, http(s)://) is passed as given; anything else is a local path.
        self.repository = (repository if isinstance(repository, str) and "://" in repository
                           else Path(repository))
        self.args = tuple(args)
        self.env = dict(env or {})
        self.workdir = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="bridge-"))
        #: `jaxport serve`, or a server command line of its own (e.g. the front binary).
        self.command = list(command) if command else serve_command()
        self.start_timeout = start_timeout
        self.port_file = self.workdir / "ports.json"
        self.stdout_path = self.workdir / "stdout.txt"
        self.log_path = self.workdir / "stderr.jsonl"
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.metrics_port = -1

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, wait_ready: bool = True,
              credentials: grpc.ChannelCredentials | None = None) -> BridgeProcess:
        """Launch, wait for the reported ports and (by default) for health SERVING, probed over
        `credentials` (TLS/mTLS) when given, else plaintext."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port_file.unlink(missing_ok=True)
        cmd = [
            *self.command, "--repository", str(self.repository), "--host", "127.0.0.1",
            "--port", "0", "--metrics-port", "0", "--port-file", str(self.port_file),
            *self.args,
        ]
        with open(self.stdout_path, "wb") as out, open(self.log_path, "wb") as err:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=err,
                                         env={**os.environ, **self.env})
        deadline = time.monotonic() + self.start_timeout
        while True:
            if self.port_file.exists():
                try:
                    ports = json.loads(self.port_file.read_text())
                    break
                except ValueError:
                    pass  # written atomically by the server, but be tolerant
            self._check_alive("before reporting its port")
            if time.monotonic() > deadline:
                self.stop(grace=1)
                raise BridgeStartError(f"bridge reported no port in {self.start_timeout:.0f} s"
                                       f"\n{self._tail()}")
            time.sleep(0.05)
        self.port = int(ports["grpc_port"])
        self.metrics_port = int(ports.get("metrics_port", -1))
        if wait_ready:
            self.wait_ready(max(1.0, deadline - time.monotonic()), credentials)
        return self

    def wait_ready(self, timeout: float = START_TIMEOUT_S,
                   credentials: grpc.ChannelCredentials | None = None) -> None:
        """Block until `grpc.health.v1.Health/Check` says SERVING (repository loaded); health is
        open to callers without a token, so only the transport `credentials` matter."""
        deadline = time.monotonic() + timeout
        channel = (grpc.insecure_channel(self.address) if credentials is None
                   else grpc.secure_channel(self.address, credentials))
        with channel:
            stub = health_pb2_grpc.HealthStub(channel)
            while True:
                self._check_alive("while loading models")
                try:
                    status = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=2).status
                    if status == health_pb2.HealthCheckResponse.SERVING:
                        return
                except grpc.RpcError:
                    pass
                if time.monotonic() > deadline:
                    raise BridgeStartError(
                        f"bridge not ready after {timeout:.0f} s\n{self._tail()}")
                time.sleep(0.05)

    def send_signal(self, sig: int) -> None:
        """Send `sig` to the server process, by PID."""
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def wait(self, timeout: float | None = None) -> int:
        """Wait for exit; the exit status (raises subprocess.TimeoutExpired)."""
        assert self.proc is not None, "not started"
        return self.proc.wait(timeout)

    def stop(self, grace: float = 15.0) -> int | None:
        """SIGTERM by PID, wait up to `grace` s, then SIGKILL; the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        return self.proc.returncode

    def __enter__(self) -> BridgeProcess:
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- access ------------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        """PID of the server process."""
        assert self.proc is not None, "not started"
        return self.proc.pid

    @property
    def address(self) -> str:
        """`127.0.0.1:PORT` of the gRPC endpoint."""
        return f"127.0.0.1:{self.port}"

    @property
    def metrics_url(self) -> str:
        """URL of the Prometheus endpoint."""
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    def metrics(self, per_worker: bool = False
                ) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Every sample of /metrics by (sample name, sorted labels). Each worker exports its
        own registry (the front adds a `worker` label to its samples): by default that label
        is dropped and a sample's values are summed over the workers."""
        from prometheus_client.parser import text_string_to_metric_families

        with urllib.request.urlopen(self.metrics_url, timeout=30) as response:
            text = response.read().decode()
        out: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = tuple(sorted((k, v) for k, v in sample.labels.items()
                                      if per_worker or k != "worker"))
                out[(sample.name, labels)] = out.get((sample.name, labels), 0.0) + sample.value
        return out

    def alive(self) -> bool:
        """True while the process runs."""
        return self.proc is not None and self.proc.poll() is None

    def channel(self, **options: int) -> grpc.Channel:
        """An insecure channel to the bridge with message limits large enough for big tensors."""
        opts = {
            "grpc.max_receive_message_length": MAX_MESSAGE_BYTES,
            "grpc.max_send_message_length": MAX_MESSAGE_BYTES,
            **options,
        }
        return grpc.insecure_channel(self.address, options=list(opts.items()))

    def log_text(self) -> str:
        """The server's stderr so far (JSON-line logs)."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def log_records(self) -> list[dict[str, object]]:
        """The server's JSON log records so far (non-JSON lines skipped)."""
        records = []
        for line in self.log_text().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
        return records

    def stdout_text(self) -> str:
        """The server's stdout so far (the `jaxport serve: ...` lines)."""
        return self.stdout_path.read_text(errors="replace") if self.stdout_path.exists() else ""

    # -- internals ---------------------------------------------------------------------------

    def _tail(self, chars: int = 4000) -> str:
        return f"--- stdout ---\n{self.stdout_text()[-chars:]}\n--- stderr ---\n" \
               f"{self.log_text()[-chars:]}"

    def _check_alive(self, when: str) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            raise BridgeStartError(
                f"bridge exited with status {self.proc.returncode} {when}\n{self._tail()}"
            )
