#!/usr/bin/env python3
"""`make conformance-peers`: the conformance suite against other OIP servers, and the report.

    .venv/bin/python tests/conformance/peers/run_peers.py [--work build/peers]
        [--report docs/conformance-report.md] [--only jaxport,triton,kserve,mlserver]

Exports the suite models (models.py) into <work>/repo for jaxport's server; Triton Inference
Server 2.51 (CPU, from the nvidia-pytriton wheel: peers/triton.py), KServe's `ModelServer` and
MLServer serve the same models from the model kit (tests/conformance/kit: numpy reference
models; make_triton_repo.py's python-backend repository, kserve_server.py run through
peers/kserve_server.py for 127.0.0.1, mlserver_runtime.py), each from its own venv (<work>/
triton, <work>/kserve, <work>/mlserver, made by the Makefile, with no jaxport in them). Each
server listens on 127.0.0.1 free ports, is waited for by polling ServerReady (wait_ready,
bounded), gets the installed jaxport-conformance wheel (<work>/runner, a venv of its own made by
the Makefile from `make conformance-dist`) over gRPC and over REST with the features it claims
(PROFILES), and is stopped by PID (its process group: SIGTERM, then SIGKILL after a grace).
Writes the per-server, per-case report; exits 1 only if jaxport failed a case of its profile
(other than run.py's PENDING_SERVER_CHANGES, reported as such) or a server could not be started
(peers' FAILs are the report's content).
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

#: What each server claims beyond the core protocol (runner --features; the server's
#: ServerMetadata.extensions add theirs, e.g. Triton's model_configuration, system_shared_memory).
#: Triton 2.51: everything its documentation defines (streams, final responses, classification,
#: CUDA shared memory answered without a GPU, gRPC and HTTP compression), batch sizes through
#: max_batch_size, BOOL as C++ bool; not scalar-tensors (it refuses rank-0 tensors in
#: non-batching models). KServe 0.21: no model versions ("model versioning is not supported
#: yet" in its data plane), no ModelStreamInfer; it documents the binary tensor data extension
#: (REST) without listing it in ServerMetadata.extensions. MLServer 1.7.1: versions (model-settings
#: "version") and ModelStreamInfer. Both list BF16 among the OIP datatypes they take, accept
#: and advertise rank-0 shapes, and run our artifacts' checkify checks (the adapter raises the
#: artifact's error as the server's 400 error).
PROFILES = {
    "jaxport": "all",
    "triton": "jaxport-models,versions,bf16,batch-sizes,bool-nonzero,triton-stream,"
              "triton-final-response,classification,classification-labels,cuda-shm-cpu,"
              "checkify,grpc-compression,rest-compression",
    "kserve": "jaxport-models,bf16,checkify,scalar-tensors,binary-data",
    "mlserver": "jaxport-models,bf16,checkify,scalar-tensors,versions,triton-stream",
}
TRANSPORTS = ("grpc", "rest")
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
    transport: str = "grpc"
    cases: dict[str, tuple[str, str]] = field(default_factory=dict)  # name -> (verdict, detail)
    summary: str = ""
    error: str = ""

    @property
    def column(self) -> str:
        return f"{self.server} {TRANSPORT_NAMES[self.transport]}"


TRANSPORT_NAMES = {"grpc": "gRPC", "rest": "REST"}


def parse(output: str) -> dict[str, tuple[str, str]]:
    out = {}
    for line in output.splitlines():
        m = LINE.match(line.strip())
        if m:
            verdict, name, msg, paren = m.groups()
            out[name] = (verdict, msg if verdict == "FAIL" else (paren or ""))
    return out


def run_runner(runner: Path, url: str, features: str, log: Path, transport: str = "grpc"
               ) -> tuple[str, str]:
    """The installed wheel's runner against one server: (stdout, summary line)."""
    cmd = [str(runner), "--url", url, "--features", features, "--transport", transport]
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


def run_peer(name: str, cmd: list[str], urls: dict[str, str], work: Path, env: dict[str, str],
             version: str) -> list[Result]:
    """Start one server, run the wheel's runner over each transport in `urls` (gRPC first: it
    is the one waited on), stop it; a Result per transport."""
    results = [Result(name, version, PROFILES[name], t) for t in urls]
    log = work / f"{name}.server.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=work, env=env,
                                start_new_session=True)
    try:
        try:
            wait_ready(urls["grpc"], proc, log)
        except Exception as exc:  # reported as this server's error; the others still run
            for r in results:
                r.error = f"{name} did not start: {exc}"
            print(results[0].error, flush=True)
            return results
        print(f"--- {name} ready on {urls} (pid {proc.pid})", flush=True)
        for r in results:
            stdout, r.summary = run_runner(
                work / "runner" / "bin" / "jaxport-conformance", urls[r.transport],
                PROFILES[name], work / f"{name}.{r.transport}.runner.log", r.transport)
            print(stdout, flush=True)
            r.cases = parse(stdout)
    finally:
        stop(proc)
    return results


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


#: Causes read in the servers' logs (build/peers/<server>.server.log), shown next to a gRPC FAIL.
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


#: Where Triton, the reference of its own extensions, and jaxport answered differently, what the
#: documentation says, and what changed (docs/conformance-report.md, "jaxport and Triton").
DECISIONS = [
    ("stream_final_response", "Triton sets `triton_final_response=true` on the response to a "
     "request that did not ask for `triton_enable_empty_final_response`; jaxport did so only "
     "on opt-in. Triton's documentation: \"Client applications using streaming GRPC can access "
     "this information by checking the response parameters for the \"triton_final_response\" "
     "parameter\"; the opt-in only adds an empty final response for decoupled models. "
     "Triton is right: the case requires the parameter on every response, and jaxport's server "
     "now sets it on every stream response, asked or not (S1), as Triton does: resolved."),
    ("error_model_ready_unknown", "Triton answers ModelReady of an unknown model OK with "
     "ready=false (REST: HTTP 400), jaxport and KServe NOT_FOUND naming the model. The protocol "
     "says only \"True if the model is ready, false if not ready\" and, over REST, \"a 4xx "
     "status code indicates false\": both are allowed, the case accepts both (alternatives); "
     "jaxport keeps NOT_FOUND."),
    ("cuda_shm_register_refused", "Triton 2.51 (a GPU build on a machine without a usable GPU) "
     "answers INVALID_ARGUMENT \"failed to register shared memory region: invalid args\"; a "
     "build without GPU support names the region (\"GPUs not supported\"), as jaxport does. The "
     "status is the rule, the wording is the build's: the case requires INVALID_ARGUMENT only."),
    ("health_* over REST", "Triton answers /v2/health/live, /v2/health/ready and "
     "/v2/models/M/ready with 200 and an empty body, jaxport and KServe with a JSON object. "
     "KServe v2: \"A 200 status code indicates true and a 4xx status code indicates false. The "
     "HTTP response body should be empty\"; the Open Inference Protocol's REST text gives "
     "{\"live\": $bool}: the runner judges the status and accepts either body."),
    ("rank-0 tensors", "Triton refuses a scalar tensor in a non-batching model at load "
     "(\"cannot have empty reshape for non-batching model as scalar tensors are not "
     "supported\"). The protocol's shape arrays can express [] and jaxport serves it, so rank-0 "
     "tensors are a feature (scalar-tensors, cf_shapes' cases); cf_multi's positives and "
     "cf_check's index became INT32[1] so Triton serves those models."),
]


def load_basis() -> tuple[dict[str, dict], dict[str, dict], dict[str, str]]:
    """(case name -> basis, source id -> source, level -> meaning) from the suite's files."""
    cases = {}
    for path in sorted((SUITE / "cases").glob("*.json")):
        case = json.loads(path.read_text(encoding="utf-8"))
        cases[case["name"]] = case.get("basis", {})
    table = json.loads((SUITE / "features.json").read_text(encoding="utf-8"))
    return cases, table.get("sources", {}), table.get("levels", {})


def report(results: list[Result], path: Path, pending: dict[str, tuple[str, str]]) -> None:
    names = sorted({n for r in results for n in r.cases})
    basis, sources, levels = load_basis()
    servers = list(dict.fromkeys(r.server for r in results))
    lines = [
        "# Conformance report: " + ", ".join(SERVER_TITLES.get(s, s) for s in servers),
        "",
        "Generated by `make conformance-peers` (tests/conformance/peers/run_peers.py): the suite's "
        "cases (tests/conformance/cases) run by the installed jaxport-conformance wheel, over gRPC "
        "and over REST, against each server serving the suite models: Triton Inference Server "
        "(CPU, from the nvidia-pytriton wheel) through the model kit's python-backend repository, "
        "KServe and MLServer through the kit's adapters, all computing with the kit's numpy "
        "reference models (tests/conformance/kit, docs/conformance-suite.md). A case needing a "
        "feature the server does not claim (`--features`, below; the server's "
        "ServerMetadata.extensions add theirs) is not applicable (N/A). FAIL cells give the "
        "status and message the server answered, verbatim (a dash after one is the cause read "
        "in the server's log). Each deviation names the case's basis and the texts it cites (their "
        "words under Sources, below): "
        + "; ".join(f"**{k}**: {v}" for k, v in levels.items())
        + ". Deployment settings given to the peers: 64 MiB gRPC messages (the 16 MiB case), "
        "127.0.0.1 only.",
        "",
        "| server | version | transport | features claimed | result |",
        "| --- | --- | --- | --- | --- |",
    ]
    for r in results:
        lines.append(f"| {r.server} | {r.version} | {TRANSPORT_NAMES[r.transport]} | "
                     f"`{r.features}` | {_cell(r.error or r.summary)} |")
    lines += ["", "## jaxport and Triton", "",
              "Where the two answered differently, which is right by Triton's documentation "
              "(the reference of its own extensions) or the protocol text, and what changed:", ""]
    lines += [f"- `{case}`: {text}" for case, text in DECISIONS]
    if pending:
        lines += ["", "Pending in jaxport's server (the case expresses the rule; the change is "
                  "the server rewrite's, tests/conformance/run.py PENDING_SERVER_CHANGES):", ""]
        lines += [f"- `{n}`: {change}" for n, (_, change) in pending.items()]
    lines += ["", "## Deviations", ""]
    for r in results:
        fails = [(n, d) for n, (v, d) in r.cases.items() if v == "FAIL"]
        lines.append(f"### {r.column}")
        lines.append("")
        if r.error:
            lines.append(f"- not run: {r.error}")
        elif not fails:
            lines.append("- none: every applicable case passed")
        for n, d in sorted(fails):
            note = NOTES.get((r.server, n)) if r.transport == "grpc" else None
            b = basis.get(n, {})
            cites = ", ".join(f"[{x}](#{x})" for x in b.get("sources", []))
            tag = " (pending server change)" if r.server == "jaxport" and n in pending else ""
            lines.append(f"- `{n}`{tag}: {d}" + (f" — {note}" if note else "")
                         + (f" [{b.get('level')}: {cites}]" if b else ""))
        lines.append("")
    lines += ["## Per case", "", "| case | basis | " + " | ".join(r.column for r in results)
              + " |", "| --- | --- |" + " --- |" * len(results)]
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
        lines.append(f"| `{n}` | {basis.get(n, {}).get('level', '?')} | " + " | ".join(cells)
                     + " |")
    lines += ["", "## Sources", "", "The texts the cases cite (tests/conformance/features.json "
              "`sources`), in their words:", ""]
    for key, src in sources.items():
        lines += [f'<a id="{key}"></a>**{key}**: {src["document"]}, {src["section"]}: '
                  f'"{src["says"]}"', ""]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines).rstrip("\n") + "\n", encoding="utf-8")


SERVER_TITLES = {"jaxport": "jaxport", "triton": "Triton", "kserve": "KServe",
                 "mlserver": "MLServer"}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def jaxport_failures(results: list[Result], pending: dict[str, tuple[str, str]]) -> list[str]:
    """jaxport's FAILs that are not pending server changes (each must be none)."""
    return [f"{r.column}: {n}" for r in results if r.server == "jaxport"
            for n, (v, _) in r.cases.items() if v == "FAIL" and n not in pending]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "peers")
    parser.add_argument("--report", type=Path, default=ROOT / "docs" / "conformance-report.md")
    parser.add_argument("--only", default="jaxport,triton,kserve,mlserver")
    args = parser.parse_args(argv)
    work = args.work.resolve()
    only = args.only.split(",")
    for peer in ("runner", *(p for p in ("triton", "kserve", "mlserver") if p in only)):
        if not (work / peer / "bin" / "python").exists():
            print(f"conformance-peers: error: {work / peer} is missing (make conformance-peers "
                  "creates it)", file=sys.stderr)
            return 2
    from run import PENDING_SERVER_CHANGES, export_models

    repository = work / "repo"
    if repository.exists():
        shutil.rmtree(repository)
    repository.mkdir(parents=True)
    print(f"--- exporting the suite models to {repository}", flush=True)
    export_models(repository)
    results: list[Result] = []
    env = {**os.environ, "PYTHONPATH": str(KIT), "PYTHONUNBUFFERED": "1"}
    if "jaxport" in only:
        port, http_port = free_port(), free_port()
        from tests.support.bridge import serve_command

        # --system-shared-memory: the REST shared-memory case (jaxport claims every feature)
        cmd = [*serve_command(), "--repository", str(repository), "--port", str(port),
               "--http-port", str(http_port), "--metrics-port", str(free_port()),
               "--system-shared-memory"]
        import jaxport

        results += run_peer("jaxport", cmd, urls(port, http_port), work, env,
                            getattr(jaxport, "__version__", "") or "this tree")
    if "triton" in only:
        import triton_server
        sys.path.insert(0, str(KIT))
        import make_triton_repo

        server = triton_server.Triton(work / "triton")
        models = work / "triton-models"
        if models.exists():
            shutil.rmtree(models)
        make_triton_repo.write_repository(models, site_packages=str(server.site_packages))
        port, http_port = free_port(), free_port()
        results += run_peer("triton", server.command(models, port, http_port),
                            urls(port, http_port), work, env, triton_server.VERSION)
    if "kserve" in only:
        grpc_port, http_port = free_port(), free_port()
        cmd = [str(work / "kserve" / "bin" / "python"), str(HERE / "kserve_server.py"),
               "--grpc_port", str(grpc_port),
               "--http_port", str(http_port),
               # a deployment setting (KServe's default is 8 MiB): room for the 16 MiB case
               "--grpc_max_send_message_length", str(64 << 20),
               "--grpc_max_receive_message_length", str(64 << 20)]
        results += run_peer("kserve", cmd, urls(grpc_port, http_port), work, env,
                            peer_version(work / "kserve", "kserve"))
    if "mlserver" in only:
        ports = (free_port(), free_port(), free_port())
        settings = work / "mlserver-models"
        mlserver_settings(settings, ports)
        cmd = [str(work / "mlserver" / "bin" / "mlserver"), "start", str(settings)]
        results += run_peer("mlserver", cmd, urls(ports[0], ports[1]), work, env,
                            peer_version(work / "mlserver", "mlserver"))
    report(results, args.report, PENDING_SERVER_CHANGES)
    print(f"conformance-peers: wrote {args.report}")
    for r in results:
        print(f"conformance-peers {r.column}: {r.error or r.summary}")
    bad = [r.column for r in results if r.error] + jaxport_failures(results,
                                                                     PENDING_SERVER_CHANGES)
    for b in bad:
        print(f"conformance-peers: error: {b}", file=sys.stderr)
    return 1 if bad else 0


def urls(grpc_port: int, http_port: int) -> dict[str, str]:
    return {"grpc": f"127.0.0.1:{grpc_port}", "rest": f"127.0.0.1:{http_port}"}


if __name__ == "__main__":
    sys.exit(main())
