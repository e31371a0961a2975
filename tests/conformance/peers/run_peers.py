#!/usr/bin/env python3
"""`make conformance-peers`: the conformance suite against other OIP servers, and the report.

    .venv/bin/python tests/conformance/peers/run_peers.py [--work build/peers]
                                                           [--report docs/conformance-report.md]

Exports the suite models (models.py) into <work>/repo for jaxport's bridge; KServe's
`ModelServer` and MLServer serve the same models from the model kit (tests/conformance/kit:
numpy reference models, kserve_server.py run through peers/kserve_server.py for 127.0.0.1,
mlserver_runtime.py), each from its own venv (<work>/kserve, <work>/mlserver, made by the
Makefile, with no jaxport in them). Each server listens on 127.0.0.1 free ports, is waited for
by polling ServerReady (wait_for_ready, bounded), gets the installed jaxport-conformance wheel
(<work>/runner, a venv of its own made by the Makefile from `make conformance-dist`) with the
features it claims (PROFILES), and is stopped by PID (its process group: SIGTERM, then SIGKILL
after a grace). Writes the per-server, per-case report; exits 1 only if jaxport failed a
case of its profile or a server could not be started (peers' FAILs are the report's content).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
SUITE = HERE.parent
KIT = SUITE / "kit"
ROOT = SUITE.parent.parent
sys.path.insert(0, str(SUITE))
sys.path.insert(0, str(ROOT))

#: What each server claims beyond the core protocol (runner --features). KServe 0.21: no model
#: versions ("model versioning is not supported yet" in its data plane), no ModelStreamInfer.
#: MLServer 1.7.1: versions (model-settings "version") and ModelStreamInfer. Both list BF16
#: among the OIP datatypes they take, and both run our artifacts' checkify checks (the adapter
#: raises the artifact's error as the server's 400 error).
PROFILES = {
    "jaxport": "all",
    "kserve": "jaxport-models,bf16,checkify",
    "mlserver": "jaxport-models,bf16,checkify,versions,triton-stream",
}
START_TIMEOUT_S = 240.0
RUN_TIMEOUT_S = 600.0
LINE = re.compile(r"^(PASS|FAIL|N/A) (\S+)(?:: (.*)| \((.*)\))?$")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Result:
    server: str
    version: str
    features: str
    cases: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (verdict, detail)
    summary: str = ""
    error: str = ""


def parse(output: str) -> dict[str, tuple[str, str]]:
    out = {}
    for line in output.splitlines():
        m = LINE.match(line.strip())
        if m:
            verdict, name, msg, paren = m.groups()
            out[name] = (verdict, msg if verdict == "FAIL" else (paren or ""))
    return out


def run_runner(runner: Path, url: str, features: str, log: Path) -> tuple[str, str]:
    """The installed wheel's runner against one server: (stdout, summary line)."""
    cmd = [str(runner), "--url", url, "--features", features]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    log.write_text(done.stdout + done.stderr)
    summary = next((ln for ln in done.stdout.splitlines() if ln.startswith("conformance ")), "")
    return done.stdout, summary or f"runner exit {done.returncode}: {done.stderr[-500:]}"


def wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Poll ServerReady (each call waits for the channel) until true, the process exits, or the
    bound passes."""
    import grpc
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
    from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc

    deadline = time.monotonic() + START_TIMEOUT_S
    with grpc.insecure_channel(url) as channel:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"exited with {proc.returncode}: {log.read_text()[-2000:]}")
            try:
                if stub.ServerReady(pb.ServerReadyRequest(), timeout=5.0,
                                    wait_for_ready=True).ready:
                    return
            except grpc.RpcError:
                continue  # not listening yet: the next call waits for the channel again
    raise RuntimeError(f"not ready within {START_TIMEOUT_S:.0f} s: {log.read_text()[-2000:]}")


def stop(proc: subprocess.Popen[bytes], grace: float = 20.0) -> None:
    """SIGTERM to the server's process group (its PID), SIGKILL after `grace`."""
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)


def peer_version(venv: Path, package: str) -> str:
    done = subprocess.run([str(venv / "bin" / "python"), "-c",
                           f"import importlib.metadata as m; print(m.version({package!r}))"],
                          capture_output=True, text=True, timeout=60)
    return done.stdout.strip() or "?"


def run_peer(name: str, cmd: list[str], url: str, work: Path, env: dict[str, str],
             version: str) -> Result:
    result = Result(name, version, PROFILES[name])
    log = work / f"{name}.server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=work, env=env,
                                start_new_session=True)
    try:
        try:
            wait_ready(url, proc, log)
        except Exception as exc:  # reported as this server's error; the others still run
            result.error = f"{name} did not start: {exc}"
            print(result.error, flush=True)
            return result
        print(f"--- {name} ready on {url} (pid {proc.pid})", flush=True)
        stdout, result.summary = run_runner(work / "runner" / "bin" / "jaxport-conformance", url,
                                            PROFILES[name], work / f"{name}.runner.log")
        print(stdout, flush=True)
        result.cases = parse(stdout)
    finally:
        stop(proc)
    return result


def mlserver_settings(root: Path, ports: tuple[int, int, int]) -> None:
    """The kit's settings (settings.json: 127.0.0.1, our ports, no worker pool, 64 MiB gRPC
    messages for the 16 MiB case; one model-settings.json per model) with our metrics port."""
    sys.path.insert(0, str(KIT))
    import mlserver_runtime

    if root.exists():
        shutil.rmtree(root)
    grpc_port, http_port, metrics_port = ports
    mlserver_runtime.write_settings(root, grpc_port=grpc_port, http_port=http_port)
    settings = json.loads((root / "settings.json").read_text())
    settings.update({"metrics_port": metrics_port, "debug": False})
    (root / "settings.json").write_text(json.dumps(settings))


#: Causes read in the servers' logs (build/peers/<server>.server.log), shown next to a FAIL.
NOTES = {
    ("kserve", "error_byte_size_mismatch"): "the short raw buffer reaches numpy's reshape "
    "(ValueError: cannot reshape array of size 5 into shape (2,3)), unchecked",
    ("kserve", "infer_fp16_raw"): "InferResponse.to_grpc tests `infer_output.data` for truth "
    "when an FP16 output is present (ValueError: truth value of an array ... is ambiguous); "
    "InferOutput documents numpy data",
    ("kserve", "infer_fp16_special_values"): "as infer_fp16_raw",
    ("kserve", "error_unknown_output"): "a requested output the model lacks is not checked "
    "against the metadata: the model's KeyError becomes INTERNAL",
    ("mlserver", "error_unknown_output"): "a requested output the model lacks is not checked "
    "against the metadata: the model's KeyError becomes INTERNAL",
    ("kserve", "error_wrong_shape"): "inputs are not checked against the model's metadata: "
    "the model's own shape error becomes INTERNAL",
    ("kserve", "error_wrong_rank"): "as error_wrong_shape",
    ("kserve", "error_shape_beyond_metadata"): "as error_wrong_shape",
    ("mlserver", "error_wrong_shape"): "inputs are not checked against the model's metadata: "
    "the model's own shape error becomes INTERNAL",
    ("mlserver", "error_wrong_rank"): "as error_wrong_shape",
    ("mlserver", "error_shape_beyond_metadata"): "as error_wrong_shape",
    ("mlserver", "stream_infer"): "MLServer writes ModelInferResponse messages on the stream, "
    "where the proto's ModelStreamInfer returns ModelStreamInferResponse; the client cannot "
    "parse them",
    ("mlserver", "stream_infer_error"): "as stream_infer",
    ("mlserver", "metadata_model_bf16"): "cf_bf16 did not load: its model-settings.json "
    "declares a BF16 input, which MLServer's Datatype enum refuses",
    ("mlserver", "infer_fp32_nan_outputs"): "NaN outputs cannot be encoded",
    ("mlserver", "check_passes"): "rank-1 outputs come back [N, 1] (NumpyCodec)",
    ("mlserver", "infer_16mib"): "rank-1 outputs come back [N, 1] (NumpyCodec)",
    ("mlserver", "infer_output_shapes_raw"): "scalar outputs come back [1]",
}


def report(results: list[Result], path: Path) -> None:
    names = sorted({n for r in results for n in r.cases})
    lines = [
        "# Conformance report: jaxport, KServe, MLServer",
        "",
        "Generated by `make conformance-peers` (tests/conformance/peers/run_peers.py): the suite's "
        "cases (tests/conformance/cases) run by the installed jaxport-conformance wheel against "
        "each server serving the suite models, KServe and MLServer through the model kit's "
        "adapters and numpy reference models (tests/conformance/kit, "
        "docs/conformance-suite.md). A case needing a "
        "feature the server does not claim (`--features`, below) is not applicable (N/A). FAIL "
        "cells give the status and message the server answered, verbatim (a dash after one is "
        "the cause read in the server's log). Deployment settings given to the peers: 64 MiB "
        "gRPC messages (the 16 MiB case), 127.0.0.1 only.",
        "",
        "| server | version | features claimed | result |",
        "| --- | --- | --- | --- |",
    ]
    for r in results:
        lines.append(f"| {r.server} | {r.version} | `{r.features}` | "
                     f"{_cell(r.error or r.summary)} |")
    lines += ["", "## Deviations", ""]
    for r in results:
        fails = [(n, d) for n, (v, d) in r.cases.items() if v == "FAIL"]
        lines.append(f"### {r.server}")
        lines.append("")
        if r.error:
            lines.append(f"- not run: {r.error}")
        elif not fails:
            lines.append("- none: every applicable case passed")
        for n, d in sorted(fails):
            note = NOTES.get((r.server, n))
            lines.append(f"- `{n}`: {d}" + (f" — {note}" if note else ""))
        lines.append("")
    lines += ["## Per case", "", "| case | " + " | ".join(r.server for r in results) + " |",
              "| --- |" + " --- |" * len(results)]
    for n in names:
        cells = []
        for r in results:
            verdict, detail = r.cases.get(n, ("-", ""))
            if verdict == "FAIL":
                cells.append(f"FAIL: {_cell(detail)}")
            elif verdict == "N/A":
                cells.append(f"n/a ({_cell(detail)})")
            else:
                cells.append(verdict)
        lines.append(f"| `{n}` | " + " | ".join(cells) + " |")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "peers")
    parser.add_argument("--report", type=Path, default=ROOT / "docs" / "conformance-report.md")
    parser.add_argument("--only", default="jaxport,kserve,mlserver")
    args = parser.parse_args(argv)
    work = args.work.resolve()
    only = args.only.split(",")
    for peer in ("runner", *(p for p in ("kserve", "mlserver") if p in only)):
        if not (work / peer / "bin" / "python").exists():
            print(f"conformance-peers: error: {work / peer} is missing (make conformance-peers "
                  "creates it)", file=sys.stderr)
            return 2
    from run import export_models

    repository = work / "repo"
    if repository.exists():
        shutil.rmtree(repository)
    repository.mkdir(parents=True)
    print(f"--- exporting the suite models to {repository}", flush=True)
    export_models(repository)
    results: list[Result] = []
    env = {**os.environ, "PYTHONPATH": str(KIT), "PYTHONUNBUFFERED": "1"}
    if "jaxport" in only:
        port = free_port()
        from tests.support.bridge import serve_command

        cmd = [*serve_command(), "--repository", str(repository), "--port", str(port),
               "--metrics-port", str(free_port())]
        import jaxport

        results.append(run_peer("jaxport", cmd, f"127.0.0.1:{port}", work, env,
                                getattr(jaxport, "__version__", "") or "this tree"))
    if "kserve" in only:
        grpc_port, http_port = free_port(), free_port()
        cmd = [str(work / "kserve" / "bin" / "python"), str(HERE / "kserve_server.py"),
               "--grpc_port", str(grpc_port),
               "--http_port", str(http_port),
               # a deployment setting (KServe's default is 8 MiB): room for the 16 MiB case
               "--grpc_max_send_message_length", str(64 << 20),
               "--grpc_max_receive_message_length", str(64 << 20)]
        results.append(run_peer("kserve", cmd, f"127.0.0.1:{grpc_port}", work, env,
                                peer_version(work / "kserve", "kserve")))
    if "mlserver" in only:
        ports = (free_port(), free_port(), free_port())
        settings = work / "mlserver-models"
        mlserver_settings(settings, ports)
        cmd = [str(work / "mlserver" / "bin" / "mlserver"), "start", str(settings)]
        results.append(run_peer("mlserver", cmd, f"127.0.0.1:{ports[0]}", work, env,
                                peer_version(work / "mlserver", "mlserver")))
    report(results, args.report)
    print(f"conformance-peers: wrote {args.report}")
    for r in results:
        print(f"conformance-peers {r.server}: {r.error or r.summary}")
    bad = [r for r in results
           if r.error or (r.server == "jaxport" and " 0 failed" not in r.summary)]
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
