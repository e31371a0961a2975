"""Typed, immutable settings of `jaxport serve`, built from CLI flags and `JAXPORT_*` env vars.

Every knob of the bridge is one field here; the CLI flag (`--metrics-port`) and the environment
variable (`JAXPORT_METRICS_PORT`) are derived from the field name, so adding a setting is adding
a field. Precedence: flag > environment > default. The object is passed explicitly to whatever
needs it; there is no global configuration.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from jaxport.bridge.limits import DEFAULT_MAX_INFLIGHT_PER_MODEL, DEFAULT_MAX_QUEUE_PER_MODEL

ENV_PREFIX = "JAXPORT_"
MIB = 1024 * 1024
# A 64 MiB tensor plus the message around it must fit (grpc's own default is 4 MiB).
DEFAULT_MAX_MESSAGE_BYTES = 96 * MIB

ENGINES = ("exported", "pjrt")
# Executables a shape-polymorphic model keeps (jaxport.bridge.engines.PolymorphicEngine): a
# sequence model served at 8..2048 step 8 has 256 lengths times every batch size; each
# executable of a small model is a few hundred KiB of host memory.
DEFAULT_COMPILED_SHAPES = 32
#: `--frontend` chose grpcio's Python server (`python`) or the native front; the grpcio server
#: is retired, so the flag (or JAXPORT_FRONTEND) is refused in one line rather than ignored.
RETIRED_FRONTEND = ("--frontend (JAXPORT_FRONTEND) was removed: jaxport serve always runs the "
                    "native front (grpcio's Python server is retired, docs/front.md); drop it")
#: Execution workers behind the native front by default (docs/front.md): on this 2-core VM two
#: workers served 1.3-1.6x the requests of one at concurrency 16, at less CPU per request;
#: each worker holds every model (memory and start-up compile times N), batching models stay
#: on one worker (their batches fill as in one process).
DEFAULT_WORKERS = 2
#: The REST port when --http-port is not given (Triton's: 8000 HTTP, 8001 gRPC, 8002 metrics);
#: with --port 0 (any free port) a fixed HTTP port would collide between such servers, so REST
#: takes a free port too.
DEFAULT_HTTP_PORT = 8000
VERSION_POLICIES = ("latest", "all")
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class SettingsError(ValueError):
    """A flag or environment variable has a value the bridge cannot use."""


def _opt(help_text: str, **extra: Any) -> dict[str, Any]:
    return {"help": help_text, **extra}


def _parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"expected true/false, got {text!r}")


def _parse_sizes(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise ValueError(f"expected comma-separated integers like 8,32, got {text!r}") from None


def _optional_path(text: str) -> Path | None:
    return Path(text) if text else None


def _optional_str(text: str) -> str | None:
    return text or None


def _otlp_endpoint(text: str) -> str | None:
    """HOST:PORT of an OTLP/gRPC trace receiver ('' = tracing off)."""
    if not text:
        return None
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT of an OTLP/gRPC receiver (e.g. 127.0.0.1:4317), "
                         f"got {text!r}")
    return text


def _plugin_choice(text: str) -> str:
    """`none` (or empty): no native engine; anything else is the front's to resolve."""
    return text.strip() or "none"


def _repository(text: str) -> Path | str:
    """A local directory, or a URL (file://, http(s)://, s3://) kept as given."""
    from jaxport.artifact.location import is_url

    return text if is_url(text) else Path(text)


@dataclass(frozen=True)
class ModelBatching:
    """Dynamic batching of one model: `None` fields fall back to the global settings."""

    name: str
    max_queue_delay_us: int | None = None
    preferred_batch_sizes: tuple[int, ...] | None = None


def _parse_batching_models(text: str) -> tuple[ModelBatching, ...]:
    """`mlp:2000:8+32,ranker` -> one ModelBatching per comma-separated entry."""
    out: list[ModelBatching] = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry:
            continue
        parts = entry.split(":")
        if len(parts) > 3 or not parts[0]:
            raise ValueError(f"entry {entry!r}: expected NAME[:MAX_QUEUE_DELAY_US"
                             "[:SIZE+SIZE...]], e.g. mlp:2000:8+32")
        delay: int | None = None
        if len(parts) > 1 and parts[1]:
            try:
                delay = int(parts[1])
            except ValueError:
                raise ValueError(f"entry {entry!r}: queue delay {parts[1]!r} is not an "
                                 "integer number of microseconds") from None
            if delay < 0:
                raise ValueError(f"entry {entry!r}: queue delay must be >= 0")
        sizes: tuple[int, ...] | None = None
        if len(parts) > 2 and parts[2]:
            try:
                sizes = tuple(int(v) for v in parts[2].split("+"))
            except ValueError:
                raise ValueError(f"entry {entry!r}: preferred sizes {parts[2]!r} must be "
                                 "integers joined by '+', e.g. 8+32") from None
            if any(b < 1 for b in sizes):
                raise ValueError(f"entry {entry!r}: preferred sizes must be positive")
        if any(m.name == parts[0] for m in out):
            raise ValueError(f"model {parts[0]!r} is listed twice")
        out.append(ModelBatching(parts[0], delay, sizes))
    return tuple(out)


@dataclass(frozen=True)
class Settings:
    """Configuration of one bridge process (see `docs/bridge.md` for the full table)."""

    repository: Path | str = field(
        metadata=_opt("model repository: DIR/<model>/<version>/ holds exporter artifacts, or a "
                      "file://, http(s):// or s3:// URL of one (listed by its index.json)",
                      parse=_repository, required=True)
    )
    model_name: str | None = field(
        default=None,
        metadata=_opt("serve --repository as this ONE model (e.g. KServe's /mnt/models): the "
                      "root is a version directory (manifest.json) or a model directory "
                      "(1/, 2/ ...)", parse=_optional_str),
    )
    workers: int = field(
        default=DEFAULT_WORKERS,
        metadata=_opt("native front: execution worker processes (each loads every model)"))
    http_port: int | None = field(
        default=None,
        metadata=_opt("native front: OIP REST/JSON port (0 = free port, -1 = off; not given: "
                      f"{DEFAULT_HTTP_PORT}, or with --port 0 a free port)"))
    front_binary: Path | None = field(
        default=None,
        metadata=_opt("native front: the jaxport-front binary (default: the one the platform "
                      "wheel installs in this package, else the one next to this Python, where "
                      "make front puts it)", parse=_optional_path))
    host: str = field(default="127.0.0.1", metadata=_opt("address to bind gRPC and metrics"))
    port: int = field(default=8001, metadata=_opt("gRPC port (0 = pick a free port)"))
    metrics_port: int = field(
        default=8002, metadata=_opt("Prometheus /metrics port (0 = free port, -1 = disabled)")
    )
    port_file: Path | None = field(
        default=None,
        metadata=_opt("write the bound ports as JSON {\"grpc_port\":..,\"metrics_port\":..,"
                      "\"http_port\":..,\"pid\":..} to this file once listening (-1: a port "
                      "that is off)", parse=_optional_path),
    )
    engine: str = field(
        default="exported",
        metadata=_opt("execution engine: 'exported' (Exported.call under jax.jit) or 'pjrt' "
                      "(compile model.mlirbc, bind arguments from the manifest)", choices=ENGINES),
    )
    compiled_shapes: int = field(
        default=DEFAULT_COMPILED_SHAPES,
        metadata=_opt("shape-polymorphic models (exported with --dim): executables kept per "
                      "model, one per request input shape, least recently used evicted"),
    )
    cpu_devices: int = field(
        default=0,
        metadata=_opt("CPU devices of each process that executes models, for sharded artifacts "
                      "(exported with --mesh, nrDevices > 1): at least the largest nrDevices "
                      "served; 0 = jax's default (1, or XLA_FLAGS' "
                      "--xla_force_host_platform_device_count)"),
    )
    model_version_policy: str = field(
        default="latest",
        metadata=_opt("versions loaded at start: 'latest' or 'all'", choices=VERSION_POLICIES),
    )
    max_message_bytes: int = field(
        default=DEFAULT_MAX_MESSAGE_BYTES,
        metadata=_opt("largest gRPC message received or sent, bytes (beyond: RESOURCE_EXHAUSTED)"),
    )
    worker_threads: int = field(
        default=128,
        metadata=_opt("most calls each execution worker holds at once, waiting ones included "
                      "(beyond: RESOURCE_EXHAUSTED); threads created on demand"),
    )
    max_inflight_per_model: int = field(
        default=DEFAULT_MAX_INFLIGHT_PER_MODEL,
        metadata=_opt("concurrent executions per model version"),
    )
    max_queue_per_model: int = field(
        default=DEFAULT_MAX_QUEUE_PER_MODEL,
        metadata=_opt("requests waiting per model version beyond which new ones are shed "
                      "with RESOURCE_EXHAUSTED"),
    )
    tls_cert: Path | None = field(
        default=None, metadata=_opt("PEM server certificate (TLS)", parse=_optional_path))
    tls_key: Path | None = field(
        default=None, metadata=_opt("PEM server private key (TLS)", parse=_optional_path))
    tls_client_ca: Path | None = field(
        default=None,
        metadata=_opt("PEM CA bundle; clients must present a certificate it signed (mTLS)",
                      parse=_optional_path))
    auth_token_file: Path | None = field(
        default=None,
        metadata=_opt("file holding a bearer token every call except health must send as "
                      "'authorization: Bearer <token>'", parse=_optional_path))
    grace_period_s: float = field(
        default=10.0, metadata=_opt("seconds SIGTERM waits for in-flight requests to finish")
    )
    log_level: str = field(default="INFO", metadata=_opt("log level", choices=LOG_LEVELS))
    batching: bool = field(
        default=False,
        metadata=_opt("dynamic batching for every model exported with --batch-sizes: gather "
                      "concurrent requests, pad to the smallest exported program, split back",
                      flag_const=True),
    )
    max_queue_delay_us: int = field(
        default=1000, metadata=_opt("batching: longest wait of the oldest queued request (us)"))
    preferred_batch_sizes: tuple[int, ...] = field(
        default=(), metadata=_opt("batching: row counts dispatched without waiting, e.g. 8,32 "
                                  "(default: the largest exported size)", parse=_parse_sizes))
    batch_queue_size: int = field(
        default=1024, metadata=_opt("batching: queued requests per model beyond which new "
                                    "ones get UNAVAILABLE"))
    batching_models: tuple[ModelBatching, ...] = field(
        default=(), metadata=_opt(
            "dynamic batching per model: comma list of NAME[:MAX_QUEUE_DELAY_US[:SIZE+SIZE...]], "
            "e.g. mlp:2000:8+32,ranker; alone, only these models batch; with --batching, these "
            "are overrides for them; a listed model exported without --batch-sizes fails to load",
            parse=_parse_batching_models))
    pjrt_plugin: str = field(
        default="cpu",
        metadata=_opt("native engine: the PJRT plugin the front executes eligible models with, "
                      "no Python on their request path (docs/native-engine.md): cpu (the pinned "
                      "XLA CPU plugin, `make setup`), cuda, or a plugin .so path; none = every "
                      "model on the Python workers", parse=_plugin_choice))
    trace_otlp_endpoint: str | None = field(
        default=None,
        metadata=_opt("tracing: HOST:PORT of an OTLP/gRPC receiver (plaintext) the front sends "
                      "OpenTelemetry spans to, one trace per request, W3C traceparent honoured "
                      "(docs/bridge.md#tracing); off unless given", parse=_otlp_endpoint))
    system_shared_memory: bool = field(
        default=False,
        metadata=_opt("Triton's system shared memory extension: same-host clients register "
                      "/dev/shm regions and pass tensors through them instead of the message. "
                      "Lets any caller read/write any /dev/shm object this server's user can; "
                      "off unless given (see docs/security.md)", flag_const=True),
    )

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise SettingsError(f"--port must be in 0..65535, got {self.port}")
        if self.http_port is None:  # resolved here, once: the front takes the value as is
            object.__setattr__(self, "http_port", 0 if self.port == 0 else DEFAULT_HTTP_PORT)
        if not -1 <= self.http_port <= 65535:
            raise SettingsError(f"--http-port must be in -1..65535, got {self.http_port}")
        if not -1 <= self.metrics_port <= 65535:
            raise SettingsError(f"--metrics-port must be in -1..65535, got {self.metrics_port}")
        for name in ("max_message_bytes", "worker_threads", "max_inflight_per_model",
                     "batch_queue_size", "workers", "compiled_shapes"):
            if getattr(self, name) < 1:
                raise SettingsError(f"--{_flag(name)} must be >= 1, got {getattr(self, name)}")
        if self.cpu_devices < 0:
            raise SettingsError(f"--cpu-devices must be >= 0, got {self.cpu_devices}")
        if self.max_queue_per_model < 0:
            raise SettingsError(
                f"--max-queue-per-model must be >= 0, got {self.max_queue_per_model}")
        if self.max_queue_delay_us < 0:
            raise SettingsError(
                f"--max-queue-delay-us must be >= 0, got {self.max_queue_delay_us}")
        if any(b < 1 for b in self.preferred_batch_sizes):
            raise SettingsError(f"--preferred-batch-sizes must be positive, got "
                                f"{list(self.preferred_batch_sizes)}")
        if self.grace_period_s < 0:
            raise SettingsError(f"--grace-period-s must be >= 0, got {self.grace_period_s}")
        if self.engine not in ENGINES:
            raise SettingsError(f"--engine must be one of {ENGINES}, got {self.engine!r}")
        if self.log_level not in LOG_LEVELS:
            raise SettingsError(f"--log-level must be one of {LOG_LEVELS}, got {self.log_level!r}")
        if self.model_version_policy not in VERSION_POLICIES:
            raise SettingsError(
                f"--model-version-policy must be one of {VERSION_POLICIES}, "
                f"got {self.model_version_policy!r}"
            )

    def batching_for(self, model: str) -> tuple[int, tuple[int, ...]] | None:
        """(max queue delay in us, preferred batch sizes) if `model` is to batch, else None."""
        listed = next((m for m in self.batching_models if m.name == model), None)
        if listed is None:
            if not self.batching:
                return None
            return self.max_queue_delay_us, self.preferred_batch_sizes
        delay = self.max_queue_delay_us if listed.max_queue_delay_us is None else (
            listed.max_queue_delay_us)
        sizes = self.preferred_batch_sizes if listed.preferred_batch_sizes is None else (
            listed.preferred_batch_sizes)
        return delay, sizes

    @property
    def metrics_enabled(self) -> bool:
        """Whether the Prometheus endpoint is served."""
        return self.metrics_port >= 0

    @classmethod
    def from_argv(
        cls, argv: Sequence[str], environ: Mapping[str, str] | None = None
    ) -> Settings:
        """Parse CLI flags (falling back to `JAXPORT_*` variables of `environ`, then defaults).

        Raises SettingsError (one line, names the flag or variable) on a bad value; argparse
        itself exits with status 2 on unknown flags.
        """
        env = os.environ if environ is None else environ
        if "JAXPORT_FRONTEND" in env or any(a == "--frontend" or a.startswith("--frontend=")
                                            for a in argv):
            raise SettingsError(RETIRED_FRONTEND)
        parser = build_parser()
        ns = parser.parse_args(list(argv))
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            given = getattr(ns, f.name)
            if given is not None:
                values[f.name] = given
                continue
            var = ENV_PREFIX + f.name.upper()
            if var in env:
                try:
                    values[f.name] = _converter(f)(env[var])
                except ValueError as exc:
                    raise SettingsError(f"{var}={env[var]!r}: {exc}") from None
            elif f.metadata.get("required"):
                raise SettingsError(f"--{_flag(f.name)} (or {var}) is required")
        return cls(**values)


def _flag(name: str) -> str:
    return name.replace("_", "-")


def _converter(f: dataclasses.Field[Any]) -> Callable[[str], Any]:
    parse = f.metadata.get("parse")
    if parse is not None:
        return parse
    kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    return {"int": int, "int | None": int, "float": float, "bool": _parse_bool}.get(kind, str)


def _flag_type(f: dataclasses.Field[Any]) -> Callable[[str], Any]:
    """The converter for argparse: a field's own parser keeps its explanation in the error
    (argparse replaces a ValueError's message with "invalid <function> value")."""
    convert = _converter(f)
    if "parse" not in f.metadata:
        return convert

    def parse(text: str) -> Any:
        try:
            return convert(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = convert.__name__
    return parse


class _Parser(argparse.ArgumentParser):
    """argparse reporting a mistake as one SettingsError line instead of usage + message."""

    def error(self, message: str) -> NoReturn:
        raise SettingsError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    """The `jaxport serve` argument parser, one flag per Settings field."""
    parser = _Parser(
        prog="jaxport serve",
        description="Serve exported JAX models over the Open Inference Protocol (KServe v2 gRPC).",
    )
    for f in dataclasses.fields(Settings):
        var = ENV_PREFIX + f.name.upper()
        default = "" if f.default is dataclasses.MISSING else f" (default: {f.default})"
        kwargs: dict[str, Any] = {
            "dest": f.name,
            "default": None,
            "type": _flag_type(f),
            "help": f"{f.metadata['help']}; env {var}{default}",
        }
        if "choices" in f.metadata:
            kwargs["choices"] = f.metadata["choices"]
        if f.metadata.get("flag_const"):  # `--batching` / `--system-shared-memory` alone: true
            kwargs.update(nargs="?", const=True)
        parser.add_argument(f"--{_flag(f.name)}", **kwargs)
    return parser
