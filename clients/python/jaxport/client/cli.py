"""`jaxport infer` (call a model) and `jaxport model list|load|unload` (manage a running
server's repository) on an Open Inference Protocol server, from the shell.

    jaxport infer --url HOST:PORT --model NAME --input x=@x.npy [--input y=@y.npy]
                  [--model-version V] [--output NAME ...] [--classes K] [--json] [--timeout S]

--url is the server's gRPC address HOST:PORT (`jaxport serve --port`, default 8001). An
http(s):// URL is refused as a usage mistake, and when the call finds an HTTP/1 server
there (a REST or metrics port) the one error line says so and which flag the gRPC port is.

A `.npy` of raw 2-byte values (`<V2`, how numpy stores bf16, e.g. the exporter's goldens) is
read as the datatype the model's metadata declares for that input.

Prints each output (name, datatype, shape, a value summary) or, with --json, one JSON object
shaped like the protocol's REST response ({"model_name", "model_version", "id", "outputs":
[{"name", "datatype", "shape", "data"}]}, data flattened row-major, non-finite floats as the
strings "NaN"/"Infinity"/"-Infinity"). `--classes K` asks for the top K classes of each
output (Triton's classification extension, the name of Triton's image_client flag) and prints
label and score per row. Errors are one line on stderr: a failed call prints
`jaxport infer: error: <CODE>: <server message>` and exits 1; a usage mistake exits 2.

    jaxport model list --url HOST:PORT [--ready] [--json]
    jaxport model load MODEL --url HOST:PORT
    jaxport model unload MODEL --url HOST:PORT

`list` prints one row per model version (model, version, state, engine, reason: why a
version is not available, or why the server does not execute a ready one natively, from its
ModelConfig parameter `reason`); `load` (re)loads a
model directory of the server's repository (a new model, a new version, a repaired artifact)
and prints the versions then ready; `unload` stops serving it. Errors as for `infer`:
`jaxport model: error: <CODE>: <server message>`, exit 1.
"""

from __future__ import annotations

import argparse
import json
import math
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from jaxport.cli import CommandParser
from jaxport.client.inference import (
    InferenceClient,
    InferenceServerError,
    InferResult,
    rest_url_message,
)
from jaxport.protocol import dtypes
from jaxport.protocol.errors import ProtocolError

PROG = "jaxport infer"


class UsageError(Exception):
    """A command-line mistake (exit status 2)."""


class _Parser(CommandParser):
    """The jaxport commands' argparse (one-line mistakes, no abbreviations): UsageError."""

    usage_error = UsageError


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Run one inference on an Open Inference Protocol (KServe v2) gRPC server.",
    )
    parser.add_argument("--url", required=True, help=URL_HELP)
    parser.add_argument("--model", required=True, help="model name")
    parser.add_argument("--model-version", default="", help="model version (default: server's)")
    parser.add_argument(
        "--input",
        action="append",
        required=True,
        metavar="NAME=@FILE.npy",
        help="an input tensor from a .npy file (repeat for each input)",
    )
    parser.add_argument(
        "--output",
        action="append",
        default=None,
        metavar="NAME",
        help="return only this output (repeatable; default: all outputs)",
    )
    parser.add_argument(
        "--classes",
        type=int,
        metavar="K",
        help="print the top K classes of each row (label and score) instead of the values: "
        "Triton's classification extension, for the --output outputs or every non-BOOL "
        "output (Triton's image_client names it -c/--classes)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--timeout", type=float, default=None, help="deadline in seconds")
    parser.add_argument("--id", default="", help="request id (echoed by the server)")
    parser.add_argument(
        "--typed",
        action="store_true",
        help="send typed `contents` instead of raw bytes (not for FP16/BF16)",
    )
    parser.add_argument(
        "--cast",
        action="store_true",
        help="convert each input to the datatype the model declares (e.g. numpy's default "
        "float64/int64 .npy to FP32/INT32); refused when values would not survive",
    )
    add_connection_args(parser)
    return parser


URL_HELP = ("the server's gRPC address HOST:PORT (jaxport serve --port, default 8001; not "
            "its REST port --http-port, default 8000)")


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    """Security options shared by `jaxport infer` and `jaxport model`."""
    parser.add_argument("--token-file", type=Path, help="file holding a bearer token")
    parser.add_argument("--tls", action="store_true", help="use TLS with the system roots")
    parser.add_argument("--ca", type=Path, help="PEM root certificates (implies TLS)")
    parser.add_argument("--cert", type=Path, help="PEM client certificate (mutual TLS)")
    parser.add_argument("--key", type=Path, help="PEM client private key (mutual TLS)")


def connect(args: argparse.Namespace) -> InferenceClient:
    """A client for `--url` with the options of `add_connection_args` (and `--timeout`)."""
    if (args.cert is None) != (args.key is None):
        raise UsageError("--cert and --key must be given together")
    check_url(args.url)
    token = None
    if args.token_file is not None:
        try:
            token = args.token_file.read_text().strip()
        except OSError as exc:
            raise ProtocolError(f"cannot read --token-file {args.token_file}: {exc}") from None
    return InferenceClient(
        args.url,
        timeout=args.timeout,
        tls=args.tls,
        root_certificates=args.ca,
        client_certificate=args.cert,
        client_key=args.key,
        token=token,
    )


def check_url(url: str) -> None:
    """A usage error for an http(s):// --url (the REST endpoint's form, not gRPC's)."""
    if url.lower().startswith(("http://", "https://")):
        raise UsageError(rest_url_message(url))


def _host_port(url: str) -> tuple[str, int] | None:
    """(host, port) of a plain `HOST:PORT` or `[V6]:PORT` address; None for other gRPC target
    forms (dns:///, unix:, ...)."""
    host, sep, port = url.rpartition(":")
    if not sep or not port.isdigit() or not host or "/" in host:
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        return None
    return host, int(port)


def http1_server(url: str, timeout: float = 2.0) -> str | None:
    """What answers HTTP/1 at `url`, asked after a gRPC call there failed UNAVAILABLE:
    "rest" for an Open Inference Protocol REST server (`GET /v2` answers 200 with the server
    metadata), "http" for another HTTP/1 server (a metrics port, a proxy); None when nothing
    answers HTTP/1 (nothing listening, a gRPC or TLS server, not a plain HOST:PORT)."""
    where = _host_port(url)
    if where is None:
        return None
    host, port = where
    request = (f"GET /v2 HTTP/1.1\r\nHost: {url}\r\nAccept: application/json\r\n"
               "Connection: close\r\n\r\n").encode()
    answer = b""
    try:
        with socket.create_connection((host, port), timeout=timeout) as conn:
            conn.sendall(request)
            while len(answer) < 65536:
                chunk = conn.recv(65536)
                if not chunk:
                    break
                answer += chunk
    except OSError:
        if not answer:
            return None
    if not answer.startswith(b"HTTP/1."):
        return None
    status = answer.split(b"\r\n", 1)[0].split()
    ok = len(status) > 1 and status[1] == b"200"
    return "rest" if ok and b'"extensions"' in answer else "http"


def explain_unavailable(args: argparse.Namespace, exc: InferenceServerError) -> Exception:
    """The error to report for a failed call: an UNAVAILABLE one that met an HTTP/1 server at
    --url becomes one line saying --url is the gRPC port (and that this one is REST)."""
    if exc.code != "UNAVAILABLE" or args.tls or args.ca is not None:
        return exc
    kind = http1_server(args.url)
    if kind == "rest":
        return ProtocolError(
            f"--url {args.url} is the server's REST port (it answers HTTP/1.1 GET /v2); --url "
            "takes the gRPC address HOST:PORT (jaxport serve --port, default 8001; REST is "
            "--http-port, default 8000)")
    if kind == "http":
        return ProtocolError(
            f"--url {args.url} answers HTTP/1.1, not gRPC (a REST, metrics or other HTTP "
            "port); --url takes the server's gRPC address HOST:PORT (jaxport serve --port, "
            "default 8001; REST --http-port 8000, metrics --metrics-port 8002)")
    return exc


def parse_input(spec: str) -> tuple[str, Path]:
    """`name=@path.npy` -> (name, path)."""
    name, sep, source = spec.partition("=")
    if not sep or not name or not source.startswith("@") or len(source) < 2:
        raise UsageError(f"--input {spec!r}: expected NAME=@FILE.npy, e.g. --input x=@x.npy")
    return name, Path(source[1:])


def load_inputs(specs: Sequence[str]) -> dict[str, np.ndarray]:
    """Read every --input file (pickles refused: a .npy is data, not code)."""
    parsed = [parse_input(s) for s in specs]
    inputs: dict[str, np.ndarray] = {}
    for name, path in parsed:
        if name in inputs:
            raise UsageError(f"--input {name!r} given twice")
        try:
            inputs[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise ProtocolError(f"input '{name}': cannot read {path} as .npy: {exc}") from None
    return inputs


def reinterpret_raw_inputs(
    client: InferenceClient, model: str, version: str, inputs: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """View raw-void .npy inputs (numpy has no bf16 descriptor, so bf16 files hold `<V2`) as
    the datatype the model's metadata declares for them."""
    declared = {t.name: t.datatype for t in client.model_metadata(model, version).inputs}
    out = dict(inputs)
    for name, array in inputs.items():
        if array.dtype.kind != "V":
            continue
        if name not in declared:
            raise ProtocolError(
                f"input '{name}': the .npy holds raw {array.dtype.itemsize}-byte values and "
                f"model '{model}' declares no input of that name (inputs: "
                f"{', '.join(declared) or 'none'})"
            )
        row = dtypes.by_datatype(declared[name])
        if row.itemsize != array.dtype.itemsize:
            raise ProtocolError(
                f"input '{name}': the .npy holds raw {array.dtype.itemsize}-byte values; "
                f"model '{model}' declares {row.datatype} ({row.itemsize} bytes per element)"
            )
        out[name] = array.view(row.numpy)
    return out


def cast_inputs(
    client: InferenceClient, model: str, version: str, inputs: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """`--cast`: each input converted to the datatype the model's metadata declares.

    Floats go to any float width (float64 -> float32 rounds, as the model would); integers
    and booleans only when every value fits the declared type; floats never become integers.
    """
    declared = {t.name: t.datatype for t in client.model_metadata(model, version).inputs}
    out = dict(inputs)
    for name, array in inputs.items():
        if name not in declared or array.dtype.kind == "V":
            continue  # the server names unknown inputs; raw bf16 is reinterpreted elsewhere
        row = dtypes.by_datatype(declared[name])
        target = np.dtype(row.numpy)
        if array.dtype == target:
            continue
        src, dst = array.dtype.kind, target.kind
        ok = src == dst == "f" or (src == "f" and row.datatype in ("FP16", "BF16", "FP32")) \
            or (src in "iub" and dst in "iuf")
        if ok and src in "iu" and dst in "iu" and array.size:
            info = np.iinfo(target)
            ok = int(array.min()) >= info.min and int(array.max()) <= info.max
        if not ok:
            raise ProtocolError(
                f"input '{name}': --cast cannot convert {array.dtype} to the declared "
                f"{row.datatype} without changing values; write the .npy as {target}"
            )
        out[name] = array.astype(target)
    return out


def _cast_hint(inputs: dict[str, np.ndarray]) -> str:
    wide = [f"{n} is {a.dtype}" for n, a in inputs.items() if a.dtype in (np.float64, np.int64)]
    if not wide:
        return ""
    return (f" (hint: {', '.join(wide)}, numpy's default; pass --cast to convert inputs to "
            "the model's datatypes)")


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def _data(array: np.ndarray) -> list[Any]:
    flat = array.ravel()
    if flat.dtype == object:  # BYTES (classification entries): strings, as REST carries them
        return [v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)
                for v in flat.tolist()]
    if flat.dtype.kind == "f" or flat.dtype == dtypes.by_datatype("BF16").numpy:
        return [_json_value(v) for v in flat.astype(np.float64).tolist()]
    return flat.tolist()


def result_json(result: InferResult) -> dict[str, Any]:
    """The REST-style JSON object of a result."""
    return {
        "model_name": result.model_name,
        "model_version": result.model_version,
        "id": result.id,
        "outputs": [
            {
                "name": name,
                "datatype": _datatype(array),
                "shape": list(array.shape),
                "data": _data(array),
            }
            for name, array in result.outputs.items()
        ],
    }


def _datatype(array: np.ndarray) -> str:
    return "BYTES" if array.dtype == object else dtypes.by_numpy(array.dtype).datatype


def class_entry(value: Any) -> str:
    """One classification entry `value:index[:label]` as `label value (class index)`, or
    `class index: value` without a label."""
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    score, _, rest = text.partition(":")
    index, _, label = rest.partition(":")
    return f"{label} {score} (class {index})" if label else f"class {index} {score}"


def classes_text(array: np.ndarray) -> list[str]:
    """The rows of a classification output: one line of top-k entries per row (the leading
    dimensions index the rows; a 1-D answer ranks the whole tensor)."""
    if array.ndim <= 1:
        return ["top: " + "; ".join(class_entry(v) for v in array.ravel())]
    rows = array.reshape(-1, array.shape[-1])
    index = list(np.ndindex(*array.shape[:-1]))
    return [f"row {','.join(map(str, i))}: " + "; ".join(class_entry(v) for v in row)
            for i, row in zip(index, rows, strict=True)]


def summarize(array: np.ndarray) -> str:
    """min/max/mean for numbers, true count for BOOL, plus the leading values."""
    if array.size == 0:
        return "(empty)"
    if array.dtype == np.bool_:
        stats = f"true={int(array.sum())}/{array.size}"
    else:
        wide = array.astype(np.float64)
        with np.errstate(all="ignore"):
            stats = f"min={wide.min():.6g} max={wide.max():.6g} mean={wide.mean():.6g}"
    values = np.array2string(
        array.ravel()[:8], separator=", ", max_line_width=10_000, threshold=8
    )
    more = ", ..." if array.size > 8 else ""
    return f"{stats} values={values[:-1]}{more}]"


def result_text(result: InferResult, classified: Sequence[str] = ()) -> str:
    """The summary `jaxport infer` prints: a line per output; the `classified` outputs (BYTES
    top-k entries) as label and score per row."""
    lines = [f"model {result.model_name} version {result.model_version or '-'}"
             + (f" id {result.id}" if result.id else "")]
    for name, array in result.outputs.items():
        if name in classified and array.dtype == object:
            k = array.shape[-1] if array.ndim else 1
            lines.append(f"  {name}  top {k} classes")
            lines += [f"    {row}" for row in classes_text(array)]
            continue
        lines.append(f"  {name}  {_datatype(array)}  {list(array.shape)}  {summarize(array)}")
    return "\n".join(lines)


def classified_outputs(client: InferenceClient, args: argparse.Namespace
                       ) -> tuple[list[str] | None, dict[str, int]]:
    """(outputs, classes) of the request: with --classes K, every --output (or every output
    of the model but BOOL ones, which have no ranking) gets top-K classification."""
    if args.classes is None:
        return args.output, {}
    if args.output:
        return None, dict.fromkeys(args.output, args.classes)
    meta = client.model_metadata(args.model, args.model_version)
    plain = [t.name for t in meta.outputs if t.datatype == "BOOL"]
    ranked = [t.name for t in meta.outputs if t.datatype != "BOOL"]
    return plain or None, dict.fromkeys(ranked, args.classes)


def run(args: argparse.Namespace) -> int:
    if (args.cert is None) != (args.key is None):
        raise UsageError("--cert and --key must be given together")
    if args.classes is not None and args.classes < 1:
        raise UsageError(f"--classes must be >= 1, got {args.classes}")
    check_url(args.url)  # usage mistakes before the input files are read
    inputs = load_inputs(args.input)
    with connect(args) as client:
        try:
            result, classes = _infer(client, args, inputs)
        except InferenceServerError as exc:
            raise explain_unavailable(args, exc) from None
    if args.json:
        print(json.dumps(result_json(result)))
    else:
        print(result_text(result, list(classes)))
    return 0


def _infer(client: InferenceClient, args: argparse.Namespace, inputs: dict[str, np.ndarray]
           ) -> tuple[InferResult, dict[str, int]]:
    if any(a.dtype.kind == "V" for a in inputs.values()):
        inputs = reinterpret_raw_inputs(client, args.model, args.model_version, inputs)
    if args.cast:
        inputs = cast_inputs(client, args.model, args.model_version, inputs)
    outputs, classes = classified_outputs(client, args)
    try:
        result = client.infer(
            args.model,
            inputs,
            outputs=outputs,
            version=args.model_version,
            request_id=args.id,
            raw=not args.typed,
            classes=classes,
        )
    except InferenceServerError as exc:
        if exc.code == "INVALID_ARGUMENT" and not args.cast:
            exc.message = f"{exc.message}{_cast_hint(inputs)}"
        raise
    return result, classes


def _fail(message: str, status: int, prog: str = PROG) -> int:
    one_line = message.replace("\r\n", "\n").replace("\n", " ")
    print(f"{prog}: error: {one_line}", file=sys.stderr)
    return status


def _main(prog: str, body: Any, argv: Sequence[str] | None) -> int:
    """Run a command's body; every failure is one stderr line (usage: exit 2, else 1)."""
    try:
        return body(argv)
    except SystemExit as exc:  # --help
        return exc.code if isinstance(exc.code, int) else 0
    except UsageError as exc:
        return _fail(str(exc), 2, prog)
    except InferenceServerError as exc:
        return _fail(f"{exc.code}: {exc.message}", 1, prog)
    except ProtocolError as exc:
        return _fail(exc.message, 1, prog)
    except OSError as exc:  # e.g. unreadable TLS files
        return _fail(str(exc), 1, prog)


def infer_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `jaxport infer`; returns the exit status."""
    return _main(PROG, lambda a: run(build_parser().parse_args(a)), argv)


# --- jaxport model -----------------------------------------------------------------------------

MODEL_PROG = "jaxport model"


def build_model_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=MODEL_PROG,
        description="List, load and unload the models of a running server's repository "
        "(the protocol's RepositoryIndex / RepositoryModelLoad / RepositoryModelUnload).",
    )
    actions = parser.add_subparsers(dest="action", metavar="{list,load,unload}",
                                    parser_class=_Parser)
    actions.required = True
    specs = {
        "list": "every model version the server's repository knows, with its state",
        "load": "load (or reload) MODEL from the server's repository directory",
        "unload": "stop serving MODEL (requests in flight finish)",
    }
    for action, help_text in specs.items():
        sub = actions.add_parser(action, help=help_text, description=help_text)
        if action == "list":
            sub.add_argument("--ready", action="store_true", help="only versions ready to serve")
            sub.add_argument("--json", action="store_true", help="one JSON object per line")
        else:
            sub.add_argument("model", metavar="MODEL", help="model (directory) name")
        sub.add_argument("--url", required=True, help=URL_HELP)
        sub.add_argument("--timeout", type=float, default=None, help="deadline in seconds")
        add_connection_args(sub)
    return parser


Served = dict[tuple[str, str], tuple[str, str]]
"""(name, version) -> (engine, reason) of the READY versions, from their ModelConfig."""


def index_text(entries: Sequence[Any], served: Served | None = None) -> str:
    """`jaxport model list`'s table: model, version, state, engine, reason. `served`: the
    engine of each READY (name, version) and why it is not the native one (`_served`); the
    REASON of a version that is not READY is the repository index's."""
    if not entries:
        return "no models"
    served = served or {}
    rows = [("MODEL", "VERSION", "STATE", "ENGINE", "REASON")] + [
        (e.name, e.version or "-", e.state or "-", *_engine_reason(e, served))
        for e in entries]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join(
        "  ".join([*(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)), r[4]]).rstrip()
        for r in rows)


def _engine_reason(entry: Any, served: Served) -> tuple[str, str]:
    engine, reason = served.get((entry.name, entry.version), ("-", ""))
    return engine, entry.reason or reason


def _served(client: Any, entries: Sequence[Any]) -> Served:
    """The engine of every READY version and the reason it has that engine, from its
    ModelConfig parameters: `engine` (`native` when the server executes it itself through
    PJRT, else the workers' engine) and `reason` (why not native; absent when native)."""
    out = {}
    for e in entries:
        if e.state == "READY":
            params = client.model_config(e.name, e.version).parameters
            engine = params["engine"].string_value if "engine" in params else ""
            reason = params["reason"].string_value if "reason" in params else ""
            out[(e.name, e.version)] = (engine or "-", reason)
    return out


def run_model(args: argparse.Namespace) -> int:
    with connect(args) as client:
        try:
            return _model_action(client, args)
        except InferenceServerError as exc:
            raise explain_unavailable(args, exc) from None


def _model_action(client: InferenceClient, args: argparse.Namespace) -> int:
    if args.action == "list":
        entries = client.repository_index(ready=args.ready)
        served = _served(client, entries)
        if args.json:
            for e in entries:
                engine, reason = _engine_reason(e, served)
                print(json.dumps({"name": e.name, "version": e.version, "state": e.state,
                                  "engine": None if engine == "-" else engine,
                                  "reason": reason}))
        else:
            print(index_text(entries, served))
        return 0
    if args.action == "load":
        client.load_model(args.model)
        ready = [e.version for e in client.repository_index(ready=True)
                 if e.name == args.model]
        print(f"loaded {args.model}: version(s) {', '.join(ready) or 'none'} ready")
        return 0
    client.unload_model(args.model)
    print(f"unloaded {args.model}")
    return 0


def model_main(argv: Sequence[str] | None = None) -> int:
    """Entry point of `jaxport model list|load|unload --url HOST:PORT`."""
    return _main(MODEL_PROG, lambda a: run_model(build_model_parser().parse_args(a)), argv)


if __name__ == "__main__":
    sys.exit(infer_main())
