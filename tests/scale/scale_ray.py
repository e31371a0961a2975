"""The bridge on Ray Serve across two Ray nodes on this machine (`make test-scale`).

Not named test_*.py: `make test` does not collect it (a two-node cluster with two replicas
takes minutes on a loaded 2-core machine); `make test-scale` passes this file explicitly.
Everything goes through Serve's gRPC proxy, exactly as a remote caller would.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from jaxport.bridge.ray import DEFAULT_MAX_ONGOING_REQUESTS, NODE_KEY, REPLICA_KEY
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from scale_helpers import CONFORMANCE, REPO, ServeCluster, conformance_run

#: What Serve can claim: every feature of the suite's table (tests/conformance/features.json)
#: but Triton's system shared memory (replicas are on other hosts than the caller; the RPCs
#: answer UNIMPLEMENTED, see docs/scale-out.md).
FEATURES = ",".join(
    f for f in json.loads((CONFORMANCE / "features.json").read_text())["features"]
    if f != "triton-shm")
STEP_TIMEOUT_S = 600


def _stub(cluster: ServeCluster) -> pb_grpc.GRPCInferenceServiceStub:
    channel = grpc.insecure_channel(cluster.url, options=[
        ("grpc.max_receive_message_length", 96 << 20),
        ("grpc.max_send_message_length", 96 << 20)])
    return pb_grpc.GRPCInferenceServiceStub(channel)


@pytest.mark.parametrize("lang", ["python", "go", "java"])
def test_conformance_runner_through_serve(serve_cluster: ServeCluster, lang: str) -> None:
    """Each language's conformance runner, unchanged, as `make conformance` runs it
    (tests/conformance/run.py), against Serve's gRPC port. Go and Java are required here as
    in `make test` (never skipped)."""
    run = conformance_run()
    assert not run.missing_toolchains([lang]), run.missing_toolchains([lang])
    for label, cmd, cwd in run.language_steps(lang, serve_cluster.url, False):
        if lang == "java":  # the one extra runner argument its Maven property passes
            cmd = [*cmd, f"-Dconformance.option=--features={FEATURES}"]
        else:
            cmd = [*cmd, "--features", FEATURES]
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                              timeout=run.STEP_TIMEOUT_S)
        out = run.ANSI.sub("", proc.stdout)
        print(f"{label}: {out[-3000:]} {proc.stderr[-2000:]}")
        assert proc.returncode == 0, f"{label}: " + out[-4000:] + proc.stderr[-2000:]
        summary = run.SUMMARY.search(out)
        assert summary is not None, f"{label}: no summary line: {out[-2000:]}"
        assert int(summary.group(2)) > 0 and summary.group(3) == "0", summary.group(0)


def test_conformance_runner_on_a_repository_over_http(suite_repository: Path) -> None:
    """The suite's repository behind a real loopback HTTP server (index.json, read-only), served
    by a real bridge (every artifact loaded and checksummed over HTTP): the Python conformance
    runner, unchanged, passes the same cases as through Serve. No cluster needed; it is here
    because it shares the exported suite repository with the cluster tests."""
    from jaxport.artifact import index as index_mod
    from support.bridge import BridgeProcess

    sys.path.insert(0, str(REPO / "tests" / "artifact"))
    from loopback_http import serving

    index_mod.write(suite_repository)
    with serving(suite_repository) as http, BridgeProcess(
            http.url, start_timeout=600) as bridge:
        proc = subprocess.run(
            [sys.executable, str(CONFORMANCE / "runner.py"), "--url", bridge.address,
             "--features", FEATURES],
            cwd=REPO, capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
        fetched = [r for r in http.requests if "/weights/" in r]
    print(proc.stdout[-3000:], proc.stderr[-2000:])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " 0 failed" in proc.stdout
    assert fetched, "no weight chunk was read over HTTP"


TRITON_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    import tritonclient.grpc as grpcclient
    url, artifact, model = sys.argv[1:4]
    manifest = json.load(open(f"{artifact}/manifest.json"))
    client = grpcclient.InferenceServerClient(url)
    assert client.is_server_live() and client.is_server_ready()
    assert client.is_model_ready(model)
    meta = client.get_model_metadata(model, as_json=True)
    checked = 0
    for case in manifest["goldens"]:
        inputs = []
        for name, path in case["inputs"].items():
            x = np.load(f"{artifact}/{path}")
            dt = [i["datatype"] for i in meta["inputs"] if i["name"] == name][0]
            t = grpcclient.InferInput(name, list(x.shape), dt)
            t.set_data_from_numpy(x)
            inputs.append(t)
        result = client.infer(model, inputs)
        for name, path in case["outputs"].items():
            want = np.load(f"{artifact}/{path}")
            got = result.as_numpy(name)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
            checked += 1
    print(json.dumps({"checked": checked}))
""")


def test_tritonclient_goldens(serve_cluster: ServeCluster, suite_repository: Path,
                              tmp_path: Path) -> None:
    """Unmodified tritonclient (its own process: it and jaxport.protocol both register
    `inference.*` messages) gets every golden of the artifact back through Serve."""
    script = tmp_path / "triton_goldens.py"
    script.write_text(TRITON_SCRIPT)
    for model in ("cf_fp32", "cf_multi"):
        proc = subprocess.run(
            [sys.executable, str(script), serve_cluster.url, str(suite_repository / model / "1"),
             model], capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert json.loads(proc.stdout.strip().splitlines()[-1])["checked"] >= 2


def _fp32_request(n: int) -> pb.ModelInferRequest:
    x = np.arange(6, dtype=np.float32).reshape(2, 3) + n
    return pb.ModelInferRequest(
        model_name="cf_fp32", id=str(n),
        inputs=[pb.ModelInferRequest.InferInputTensor(name="data_in", datatype="FP32",
                                                      shape=[2, 3])],
        raw_input_contents=[x.tobytes()])


def _held_stream(stub: pb_grpc.GRPCInferenceServiceStub, n: int
                 ) -> tuple[queue.Queue, Any]:
    """A ModelStreamInfer call whose requests come from a queue the test feeds: request `n` is
    sent and answered, then the stream stays open (held on its replica: Serve counts an open
    stream as an ongoing request there) until the test puts None in the queue."""
    feed: queue.Queue = queue.Queue()

    def requests():
        while (item := feed.get()) is not None:
            yield item

    feed.put(_fp32_request(n))
    call = stub.ModelStreamInfer(requests(), timeout=600)
    first = next(call)
    assert not first.error_message and first.infer_response.id == str(n), first
    return feed, call


def test_requests_served_on_both_nodes(serve_cluster: ServeCluster) -> None:
    """Placement proven by requests held on the replicas, not by counting sequential calls
    (Serve's proxy prefers its own node's replica, so sequential calls can all land on one):
    max_ongoing_requests + 1 streams are opened and held, each answered once. One replica
    takes at most max_ongoing_requests of them, so the last ones must be on the other replica;
    each stream's trailing metadata names the replica and Ray node that served it."""
    stub = _stub(serve_cluster)
    held = [_held_stream(stub, n) for n in range(DEFAULT_MAX_ONGOING_REQUESTS + 1)]
    replicas: set[str] = set()
    nodes: set[str] = set()
    for feed, call in held:
        feed.put(None)  # half-close: the stream ends once its one answer is out
        assert list(call) == []
        md = dict(call.trailing_metadata())
        replicas.add(md[REPLICA_KEY])
        nodes.add(md[NODE_KEY])
    print(f"{len(held)} held streams served by replicas {sorted(replicas)} on nodes "
          f"{sorted(nodes)}")
    assert len(replicas) == 2, replicas
    assert nodes == set(serve_cluster.node_ids), nodes


@pytest.mark.parametrize(("rpc", "request_", "code", "words"), [
    ("ModelInfer", pb.ModelInferRequest(model_name="nope"), grpc.StatusCode.NOT_FOUND,
     "unknown model 'nope'"),
    ("ModelMetadata", pb.ModelMetadataRequest(name="cf_fp32", version="7"),
     grpc.StatusCode.NOT_FOUND, "model 'cf_fp32' has no version '7'"),
    ("RepositoryModelLoad", pb.RepositoryModelLoadRequest(model_name="cf_fp32"),
     grpc.StatusCode.UNIMPLEMENTED, "RepositoryModelLoad is not supported by jaxport on Ray"),
    ("RepositoryModelUnload", pb.RepositoryModelUnloadRequest(model_name="cf_fp32"),
     grpc.StatusCode.UNIMPLEMENTED, "redeploy the application"),
    ("SystemSharedMemoryRegister",
     pb.SystemSharedMemoryRegisterRequest(name="r", key="/r", byte_size=8),
     grpc.StatusCode.UNIMPLEMENTED, "cannot see its /dev/shm"),
    ("SystemSharedMemoryStatus", pb.SystemSharedMemoryStatusRequest(),
     grpc.StatusCode.UNIMPLEMENTED, "SystemSharedMemoryStatus is not supported"),
])
def test_errors_are_the_bridge_statuses(serve_cluster: ServeCluster, rpc: str, request_: object,
                                        code: grpc.StatusCode, words: str) -> None:
    """Domain errors reach the caller with the codes and messages of `jaxport serve` (the
    one status table, bridge/status.py), refusals with UNIMPLEMENTED saying why; never a Ray
    traceback."""
    with pytest.raises(grpc.RpcError) as info:
        getattr(_stub(serve_cluster), rpc)(request_, timeout=60)
    assert info.value.code() == code, info.value.details()
    assert words in info.value.details()
    assert "Traceback" not in info.value.details() and "ray" not in info.value.details()


def test_server_metadata_claims_what_serve_does(serve_cluster: ServeCluster) -> None:
    md = _stub(serve_cluster).ServerMetadata(pb.ServerMetadataRequest(), timeout=60)
    assert md.name == "jaxport"
    assert {"model_configuration", "statistics"} <= set(md.extensions)
    assert not {"model_repository", "system_shared_memory"} & set(md.extensions)
    index = _stub(serve_cluster).RepositoryIndex(pb.RepositoryIndexRequest(), timeout=60)
    assert {m.name for m in index.models if m.state == "READY"} >= {"cf_fp32", "cf_multi"}


def test_cluster_resources(serve_cluster: ServeCluster) -> None:
    """Times, memory and the temp dir (for the report): two nodes, Ray's files under the
    session's own directory."""
    import psutil

    procs = psutil.Process().children(recursive=True)
    rss = 0
    for proc in procs:
        try:
            rss += proc.memory_info().rss
        except psutil.Error:
            continue
    print(f"cluster start {serve_cluster.start_seconds:.1f} s, deploy (2 replicas, every suite "
          f"model loaded) {serve_cluster.deploy_seconds:.1f} s; {len(procs)} Ray processes, "
          f"RSS {rss / 2**20:.0f} MiB (shared pages counted in each)")
    assert any(p.name.startswith("session_") for p in serve_cluster.temp_dir.iterdir())
    assert os.path.isdir(serve_cluster.temp_dir)


def _replica_processes() -> list:
    """The replica actors' processes (children of this test's cluster, by Ray's title)."""
    import psutil

    found = []
    for proc in psutil.Process().children(recursive=True):
        try:
            if "ServeReplica:jaxport" in " ".join(proc.cmdline()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def test_replica_killed_under_load(serve_cluster: ServeCluster) -> None:
    """SIGKILL of one replica's process while 4 callers keep sending: the calls caught on it
    fail (counted, with their status), the rest are served, Serve starts a new replica that
    serves again. Runs last: it leaves the cluster with a new replica."""
    import collections
    import threading
    import time

    victims = _replica_processes()
    assert len(victims) == 2, victims
    stop = threading.Event()
    lock = threading.Lock()
    outcomes: list[tuple[float, str, str, str]] = []  # (time, code, replica, details)
    seen = threading.Condition(lock)

    def caller(k: int) -> None:
        stub = _stub(serve_cluster)
        n = 0
        while not stop.is_set():
            n += 1
            try:
                _, call = stub.ModelInfer.with_call(_fp32_request(k * 1_000_000 + n), timeout=60)
                entry = (time.monotonic(), "OK", dict(call.trailing_metadata())[REPLICA_KEY], "")
            except grpc.RpcError as exc:
                entry = (time.monotonic(), exc.code().name, "", exc.details() or "")
            with seen:
                outcomes.append(entry)
                seen.notify_all()

    def replicas_serving(since: float) -> set[str]:
        return {r for t, c, r, _ in outcomes if c == "OK" and t >= since}

    threads = [threading.Thread(target=caller, args=(k,), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    try:
        with seen:  # steady state: both replicas answering
            assert seen.wait_for(lambda: len(replicas_serving(0)) == 2, timeout=120)
            before = replicas_serving(0)
        victim = victims[0]
        killed_at = time.monotonic()
        victim.kill()  # SIGKILL, by pid, a process of this test's own cluster
        with seen:  # recovery: a replica that did not exist before answers
            assert seen.wait_for(lambda: replicas_serving(killed_at) - before, timeout=180)
            recovered_at = min(t for t, c, r, _ in outcomes
                               if c == "OK" and t >= killed_at and r not in before)
            n_at_recovery = len(outcomes)
            assert seen.wait_for(lambda: len(outcomes) >= n_at_recovery + 50, timeout=120)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=90)
    failures = collections.Counter((c, d[:120]) for _, c, _, d in outcomes if c != "OK")
    print(f"replica kill under load (c=4): {len(outcomes)} requests, "
          f"{sum(failures.values())} failed {dict(failures)}; a new replica served "
          f"{recovered_at - killed_at:.1f} s after the kill")
    assert all(code in ("INTERNAL", "UNAVAILABLE") for code, _ in failures), failures
    assert sum(failures.values()) < len(outcomes) // 10, failures
