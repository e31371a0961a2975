"""`jaxport infer` (call a model) and `jaxport model list|load|unload` (manage a running
server's repository) on an Open Inference Protocol server, from the shell.

    jaxport infer --url HOST:PORT --model NAME --input x=@x.npy [--input y=@y.npy]
                  [--model-version V] [--output NAME ...] [--json] [--timeout S]

A `.npy` of raw 2-byte values (`<V2`, how numpy stores bf16, e.g. the exporter's goldens) is
read as the datatype the model's metadata declares for that input.

Prints each output (name, datatype, shape, a value summary) or, with --json, one JSON object
shaped like the protocol's REST response ({"model_name", "model_version", "id", "outputs":
[{"name", "datatype", "shape", "data"}]}, data flattened row-major, non-finite floats as the
strings "NaN"/"Infinity"/"-Infinity"). Errors are one line on stderr: a failed call prints
`jaxport infer: error: <CODE>: <server message>` and exits 1; a usage mistake exits 2.

    jaxport model list --url HOST:PORT [--ready] [--json]
    jaxport model load MODEL --url HOST:PORT
    jaxport model unload MODEL --url HOST:PORT

`list` prints one row per model version (model, version, state, reason); `load` (re)loads a
model directory of the server's repository (a new model, a new version, a repaired artifact)
and prints the versions then ready; `unload` stops serving it. Errors as for `infer`:
`jaxport model: error: <CODE>: <server message>`, exit 1.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
from jaxport.client.inference import InferenceClient, InferenceServerError, InferResult
from jaxport.protocol import dtypes
from jaxport.protocol.errors import ProtocolError

PROG = "jaxport infer"


class UsageError(Exception):
    """A command-line mistake (exit status 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a mistake in one line instead of usage + message."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Run one inference on an Open Inference Protocol (KServe v2) gRPC server.",
    )
    parser.add_argument("--url", required=True, help="server address HOST:PORT")
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
                "datatype": dtypes.by_numpy(array.dtype).datatype,
                "shape": list(array.shape),
                "data": _data(array),
            }
            for name, array in result.outputs.items()
        ],
    }


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


def result_text(result: InferResult) -> str:
    lines = [f"model {result.model_name} version {result.model_version or '-'}"
             + (f" id {result.id}" if result.id else "")]
    for name, array in result.outputs.items():
        datatype = dtypes.by_numpy(array.dtype).datatype
        lines.append(f"  {name}  {datatype}  {list(array.shape)}  {summarize(array)}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if (args.cert is None) != (args.key is None):
        raise UsageError("--cert and --key must be given together")
    inputs = load_inputs(args.input)
    with connect(args) as client:
        if any(a.dtype.kind == "V" for a in inputs.values()):
            inputs = reinterpret_raw_inputs(client, args.model, args.model_version, inputs)
        if args.cast:
            inputs = cast_inputs(client, args.model, args.model_version, inputs)
        try:
            result = client.infer(
                args.model,
                inputs,
                outputs=args.output,
                version=args.model_version,
                request_id=args.id,
                raw=not args.typed,
            )
        except InferenceServerError as exc:
            if exc.code == "INVALID_ARGUMENT" and not args.cast:
                exc.message = f"{exc.message}{_cast_hint(inputs)}"
            raise
    if args.json:
        print(json.dumps(result_json(result)))
    else:
        print(result_text(result))
    return 0


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
        sub.add_argument("--url", required=True, help="server address HOST:PORT")
        sub.add_argument("--timeout", type=float, default=None, help="deadline in seconds")
        add_connection_args(sub)
    return parser


def index_text(entries: Sequence[Any], engines: dict[tuple[str, str], str] | None = None) -> str:
    """`jaxport model list`'s table: model, version, state, engine, reason. `engines`: the
    engine serving each READY (name, version), from its ModelConfig (`-` when unknown)."""
    if not entries:
        return "no models"
    engines = engines or {}
    rows = [("MODEL", "VERSION", "STATE", "ENGINE", "REASON")] + [
        (e.name, e.version or "-", e.state or "-", engines.get((e.name, e.version), "-"),
         e.reason) for e in entries]
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    return "\n".join(
        "  ".join([*(c.ljust(w) for c, w in zip(r[:4], widths, strict=True)), r[4]]).rstrip()
        for r in rows)


def _engines(client: Any, entries: Sequence[Any]) -> dict[tuple[str, str], str]:
    """The engine of every READY version (ModelConfig's `engine` parameter: `native` when the
    server's front executes it through PJRT, else the workers' engine)."""
    out = {}
    for e in entries:
        if e.state == "READY":
            config = client.model_config(e.name, e.version)
            out[(e.name, e.version)] = config.parameters["engine"].string_value or "-"
    return out


def run_model(args: argparse.Namespace) -> int:
    with connect(args) as client:
        if args.action == "list":
            entries = client.repository_index(ready=args.ready)
            engines = _engines(client, entries)
            if args.json:
                for e in entries:
                    print(json.dumps({"name": e.name, "version": e.version, "state": e.state,
                                      "engine": engines.get((e.name, e.version)),
                                      "reason": e.reason}))
            else:
                print(index_text(entries, engines))
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
