"""`jaxport-conformance`: run the Open Inference Protocol conformance suite against a server.

    jaxport-conformance --url HOST:PORT [--transport grpc|rest] [--features core|all|LIST|FILE]
                        [--cases DIR] [--features-file PATH] [--run SUBSTRING]
                        [--ca CA.pem] [--cert C.pem --key K.pem] [--token TOKEN]
                        [--json FILE] [--junit FILE]
    jaxport-conformance --write-kit DIR     # the model kit: reference models and adapters

Prints one PASS/FAIL/N/A line per case and `conformance <label>: N passed, M failed[, K not
applicable]`; exits 1 if a case failed, 2 for a usage error. `--features` names what the
server claims beyond the core protocol (the feature table, features.json beside the cases);
cases needing more are N/A, never failures. tests/conformance/runner.py and rest_runner.py in
the jaxport tree are this same entry point (runner.py adds jaxport.client and --async).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc

from jaxport_conformance import report, rest, suite
from jaxport_conformance._proto import pb_grpc
from jaxport_conformance.grpc_runner import Runner

MAX_MESSAGE_BYTES = 256 * 1024 * 1024  # as jaxport.client: the 16 MiB case and more


def parser(prog: str = "jaxport-conformance") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    p.add_argument("--url", default=None,
                   help="server host:port (default $JAXPORT_CONFORMANCE_URL; for REST "
                        "$JAXPORT_CONFORMANCE_REST_URL first)")
    p.add_argument("--transport", choices=("grpc", "rest"), default="grpc",
                   help="gRPC (default) or HTTP/REST (KServe v2 JSON + binary data)")
    p.add_argument("--cases", type=Path, default=suite.DEFAULT_CASES,
                   help=f"case directory (default: the bundled cases, {suite.DEFAULT_CASES})")
    p.add_argument("--features-file", type=Path, default=None,
                   help="the feature table (default: features.json beside --cases)")
    p.add_argument("--features", default="all",
                   help="what the server claims beyond the core protocol: 'all' (default), "
                        "'core', a comma list of the feature table's names, or a file of them; "
                        "cases needing more are N/A (with anything but 'all', features named by "
                        "ServerMetadata.extensions are added)")
    p.add_argument("--protocol-only", action="store_true", help="the same as --features core")
    p.add_argument("--run", default="", help="only cases whose name contains this")
    p.add_argument("--ca", type=Path, default=os.environ.get("JAXPORT_CONFORMANCE_CA"),
                   help="PEM CA certificate: use TLS (default $JAXPORT_CONFORMANCE_CA)")
    p.add_argument("--cert", type=Path, default=os.environ.get("JAXPORT_CONFORMANCE_CERT"),
                   help="PEM client certificate for mutual TLS, with --key "
                        "(default $JAXPORT_CONFORMANCE_CERT)")
    p.add_argument("--key", type=Path, default=os.environ.get("JAXPORT_CONFORMANCE_KEY"),
                   help="PEM private key of --cert (default $JAXPORT_CONFORMANCE_KEY)")
    p.add_argument("--token", default=os.environ.get("JAXPORT_CONFORMANCE_TOKEN"),
                   help="bearer token sent on every call (default $JAXPORT_CONFORMANCE_TOKEN)")
    p.add_argument("--json", type=Path, default=None, help="also write the results as JSON")
    p.add_argument("--junit", type=Path, default=None, help="also write JUnit XML")
    p.add_argument("--write-kit", type=Path, default=None, metavar="DIR",
                   help="copy the model kit (numpy reference models, KServe/MLServer adapters, "
                        "the Triton repository generator) into DIR and exit")
    return p


def kit_dir() -> Path:
    """The model kit: inside the installed wheel, else tests/conformance/kit of the tree."""
    inside = Path(__file__).resolve().parent / "kit"
    return inside if inside.is_dir() else Path(__file__).resolve().parents[1] / "kit"


def write_kit(out: Path) -> int:
    """Copy the kit's files into `out` (created); 2 when a file would be overwritten."""
    files = sorted(p for p in kit_dir().iterdir() if p.suffix in (".py", ".md"))
    clash = [p.name for p in files if (out / p.name).exists()]
    if clash:
        print(f"jaxport-conformance: error: {out} already has {clash}", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    for p in files:
        shutil.copy2(p, out / p.name)
        print(out / p.name)
    return 0


#: Makes the gRPC runner of a run: (args, channel options, credentials or None, call metadata)
#: -> (label, Runner, close). tests/conformance/runner.py passes one using jaxport.client.
GrpcFactory = Callable[[argparse.Namespace, list[tuple[str, int]], Any,
                        tuple[tuple[str, str], ...]], tuple[str, Runner, Callable[[], None]]]


def stub_runner(args: argparse.Namespace, options: list[tuple[str, int]], credentials: Any,
                metadata: tuple[tuple[str, str], ...]) -> tuple[str, Runner, Callable[[], None]]:
    """The installed tool's gRPC runner: every call through the generated stub."""
    channel = (grpc.secure_channel(args.url, credentials, options=options)
               if credentials is not None else grpc.insecure_channel(args.url, options=options))
    return "python", Runner(pb_grpc.GRPCInferenceServiceStub(channel), metadata), channel.close


def main(argv: list[str] | None = None, *, prog: str = "jaxport-conformance",
         arg_parser: argparse.ArgumentParser | None = None,
         grpc_factory: GrpcFactory = stub_runner) -> int:
    """Run every case; print per-case lines and the summary; write --json/--junit; 0 only if
    none failed."""
    p = arg_parser or parser(prog)
    args = p.parse_args(argv)
    if args.write_kit is not None:
        return write_kit(args.write_kit)
    if args.url is None:
        env = (("JAXPORT_CONFORMANCE_REST_URL",) if args.transport == "rest" else ()) + (
            "JAXPORT_CONFORMANCE_URL",)
        args.url = next((os.environ[e] for e in env if os.environ.get(e)), None)
    if not args.url:
        p.error("--url (or JAXPORT_CONFORMANCE_URL) is required")
    if bool(args.cert) != bool(args.key):
        p.error("--cert and --key (JAXPORT_CONFORMANCE_CERT/KEY) go together")
    label = "python-rest" if args.transport == "rest" else "python"
    table = args.features_file or suite.features_file(args.cases)
    try:
        if not Path(args.cases).is_dir():
            raise ValueError(f"no case directory {args.cases}")
        if not Path(table).is_file():
            raise ValueError(f"no feature table {table} (features.json beside --cases, or "
                             "--features-file)")
        features, extension_features = suite.load_features(table)
        claimed = suite.parse_features("core" if args.protocol_only else args.features, features)
        cases = suite.load_cases(args.cases)
        context = rest.ssl_context(args.ca, args.cert, args.key)
    except (OSError, ValueError, KeyError) as exc:
        print(f"conformance {label}: error: {exc}", file=sys.stderr)
        return 2
    metadata = (("authorization", f"Bearer {args.token}"),) if args.token else ()
    if args.transport == "rest":
        client = rest.RestClient(args.url, context, args.token)
        run_case: Callable[[dict[str, Any]], None] = rest.RestRunner(client).run
        close: Callable[[], None] = lambda: None  # noqa: E731  (a connection per request)

        def extensions() -> list[str]:
            return list(client.get_json("/v2")[1].get("extensions", []))
        extension_errors: tuple[type[BaseException], ...] = (rest.RestError, OSError, ValueError)
    else:
        credentials = None
        if args.ca or args.cert:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=Path(args.ca).read_bytes() if args.ca else None,
                private_key=Path(args.key).read_bytes() if args.key else None,
                certificate_chain=Path(args.cert).read_bytes() if args.cert else None)
        options = [("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
                   ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES)]
        label, runner, close = grpc_factory(args, options, credentials, metadata)
        run_case = runner.run

        def extensions() -> list[str]:
            return list(runner.server_metadata().extensions)
        extension_errors = (*runner.errors, grpc.RpcError)
    result = report.Report(label, always_tail=args.transport == "rest")
    try:
        if claimed is not None:
            try:
                suite.claim_extensions(claimed, extensions(), features, extension_features)
            except extension_errors:
                pass  # the metadata_server case reports that failure
            result.features = sorted(claimed)
            print(f"features claimed: {', '.join(sorted(claimed)) or 'core only'}")
        for case in cases:
            if args.run and args.run not in case["name"]:
                continue
            result.results.append(judge(case, claimed, run_case, args.transport))
            print(result.results[-1].line(), flush=True)
    finally:
        close()
    print(result.summary())
    try:
        result.write(args.json, args.junit)
    except OSError as exc:
        print(f"conformance {label}: error: {exc}", file=sys.stderr)
        return 2
    return 1 if result.count(report.FAIL) else 0


def judge(case: dict[str, Any], claimed: set[str] | None,
          run_case: Callable[[dict[str, Any]], None], transport: str) -> report.Result:
    """One case's result: N/A (another transport's case, no REST form, or a feature not
    claimed), PASS or FAIL."""
    reason = suite.other_transport(case, transport) or (
        rest.not_applicable(case) if transport == "rest" else None)
    if transport == "rest":  # its REST form may need Triton's binary data extension
        case = {**case, "requires": [*case.get("requires", []), *rest.transport_requires(case)]}
    missing = suite.missing_features(case, claimed)
    if reason or missing:
        return report.Result(case["name"], report.NOT_APPLICABLE,
                             reason or "needs " + ", ".join(missing))
    start = time.perf_counter()
    try:
        run_case(case)
    except suite.CaseFailure as exc:
        return report.Result(case["name"], report.FAIL, str(exc), time.perf_counter() - start)
    except Exception as exc:  # a failed case is reported, never fatal to the run
        return report.Result(case["name"], report.FAIL, f"{type(exc).__name__}: {exc}",
                             time.perf_counter() - start)
    return report.Result(case["name"], report.PASS, seconds=time.perf_counter() - start)


if __name__ == "__main__":
    sys.exit(main())
