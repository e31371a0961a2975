"""jaxport on Ray across two Ray nodes on this machine (`make test-scale`): each replica runs a
front; callers reach the fronts directly (client-side round_robin over the registry's
addresses) or through Serve's gRPC proxy (the convenience path).

Not named test_*.py: `make test` does not collect it (a two-node cluster takes a minute or
more on a loaded 2-core machine); `make test-scale` passes this file explicitly.
"""

from __future__ import annotations

import collections
import json
import os
import queue
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from jaxport.bridge.ray import (
    DEFAULT_MAX_ONGOING_REQUESTS,
    NODE_KEY,
    REPLICA_KEY,
    grpc_target,
    refusal,
)
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from jaxport.protocol.gen.inference import grpc_service_pb2_grpc as pb_grpc
from scale_helpers import CONFORMANCE, REPO, ServeCluster, conformance_run
from support.ray_cluster import wait_fronts

ALL_FEATURES = json.loads((CONFORMANCE / "features.json").read_text())["features"]
#: Through a front directly: every feature of the suite (the caller is on the front's host).
DIRECT_FEATURES = ",".join(ALL_FEATURES)
#: Through Serve's proxy: all but Triton's system shared memory (refused there: the replica
#: may be on another host than the caller).
PROXY_FEATURES = ",".join(f for f in ALL_FEATURES if f != "triton-shm")
STEP_TIMEOUT_S = 600


def _stub(target: str, **options: Any) -> pb_grpc.GRPCInferenceServiceStub:
    channel = grpc.insecure_channel(target, options=[
        ("grpc.max_receive_message_length", 96 << 20),
        ("grpc.max_send_message_length", 96 << 20), *options.items()])
    return pb_grpc.GRPCInferenceServiceStub(channel)


def _round_robin(fronts: list[str]) -> grpc.Channel:
    """The Python example of docs/scale-out.md: one channel over every front."""
    return grpc.insecure_channel(grpc_target([{"grpc": f} for f in fronts]),
                                 options=[("grpc.lb_policy_name", "round_robin")])


def _run_runner(lang: str, url: str, features: str) -> None:
    run = conformance_run()
    assert not run.missing_toolchains([lang]), run.missing_toolchains([lang])
    for label, cmd, cwd in run.language_steps(lang, url, False):
        cmd = [*cmd, "--features", features]
        proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                              timeout=run.STEP_TIMEOUT_S)
        out = run.ANSI.sub("", proc.stdout)
        print(f"{label} at {url}: {out[-3000:]} {proc.stderr[-2000:]}")
        assert proc.returncode == 0, f"{label}: " + out[-4000:] + proc.stderr[-2000:]
        summary = run.SUMMARY.search(out)
        assert summary is not None, f"{label}: no summary line: {out[-2000:]}"
        assert int(summary.group(2)) > 0 and summary.group(3) == "0", summary.group(0)


def test_one_front_per_node_serving_natively(serve_cluster: ServeCluster) -> None:
    """The registry lists one front per replica, the two on the cluster's two nodes; each
    executes the suite's models with the native engine (ModelConfig `engine`)."""
    fronts = serve_cluster.fronts
    assert len(fronts) == 2 and len({f["grpc"] for f in fronts}) == 2, fronts
    assert {f["node"] for f in fronts} == set(serve_cluster.node_ids), fronts
    for front in fronts:
        config = _stub(front["grpc"]).ModelConfig(pb.ModelConfigRequest(name="cf_fp32"),
                                                  timeout=60).config
        assert config.parameters["engine"].string_value == "native", config.parameters


def test_addresses_from_the_command_and_serves_http(serve_cluster: ServeCluster) -> None:
    """The documented ways to get the fronts: `python -m jaxport.bridge.ray addresses` on a
    machine of the cluster, and GET on the application's route through Serve's HTTP proxy."""
    address = serve_cluster.cluster.address
    env = {**os.environ, "RAY_TMPDIR": str(serve_cluster.temp_dir.parent)}
    cmd = [sys.executable, "-m", "jaxport.bridge.ray", "addresses", "--address", address]
    lines = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, check=True)
    assert sorted(lines.stdout.split()) == sorted(serve_cluster.front_addresses), lines.stderr
    target = subprocess.run([*cmd, "--format", "target"], capture_output=True, text=True,
                            timeout=120, env=env, check=True).stdout.strip()
    assert target == grpc_target(serve_cluster.fronts)
    with urllib.request.urlopen(f"http://127.0.0.1:{serve_cluster.http_port}/",
                                timeout=60) as answer:
        listed = json.loads(answer.read())
    assert sorted(f["grpc"] for f in listed["replicas"]) == sorted(serve_cluster.front_addresses)
    assert listed["grpc_target"] == target


@pytest.mark.parametrize(("lang", "front"), [("python", 0), ("python", 1), ("go", 0),
                                             ("java", 1)])
def test_conformance_runner_direct(serve_cluster: ServeCluster, lang: str, front: int) -> None:
    """Each language's conformance runner, unchanged, against a front of the cluster (the
    direct path), every feature of the suite. Go and Java are required (never skipped)."""
    _run_runner(lang, serve_cluster.front_addresses[front], DIRECT_FEATURES)


@pytest.mark.parametrize("lang", ["python", "go", "java"])
def test_conformance_runner_through_serve(serve_cluster: ServeCluster, lang: str) -> None:
    """The same runners through Serve's gRPC proxy (each call forwarded by a replica to its
    front), every feature but system shared memory."""
    _run_runner(lang, serve_cluster.url, PROXY_FEATURES)


def _fp32_request(n: int) -> pb.ModelInferRequest:
    x = np.arange(6, dtype=np.float32).reshape(2, 3) + n
    return pb.ModelInferRequest(
        model_name="cf_fp32", id=str(n),
        inputs=[pb.ModelInferRequest.InferInputTensor(name="data_in", datatype="FP32",
                                                      shape=[2, 3])],
        raw_input_contents=[x.tobytes()])


def _inference_count(front: str) -> int:
    stats = _stub(front).ModelStatistics(pb.ModelStatisticsRequest(name="cf_fp32"), timeout=60)
    return sum(s.inference_count for s in stats.model_stats)


def test_python_round_robin_reaches_every_front(serve_cluster: ServeCluster,
                                                suite_repository: Path) -> None:
    """`jaxport.client.InferenceClient` on a round_robin channel over the fronts' addresses
    (docs/scale-out.md's Python example): every answer right, both fronts counted calls."""
    from jaxport.client import InferenceClient

    fronts = serve_cluster.front_addresses
    before = {f: _inference_count(f) for f in fronts}
    with _round_robin(fronts) as channel, InferenceClient(channel=channel, timeout=60) as client:
        for n in range(20):
            x = (np.arange(6, dtype=np.float32).reshape(2, 3) + n)
            out = client.infer("cf_fp32", {"data_in": x})
            assert set(out.outputs) >= {"data_out"}, out.outputs
    delta = {f: _inference_count(f) - before[f] for f in fronts}
    assert all(d > 0 for d in delta.values()) and sum(delta.values()) >= 20, delta


def test_go_round_robin_reaches_every_front(serve_cluster: ServeCluster,
                                            suite_repository: Path, tmp_path: Path) -> None:
    """tests/bench/rrload (grpc-go, the manual resolver + round_robin of docs/scale-out.md's
    Go example): 2 s at c=4 over both fronts, every answer checked against the artifact's
    golden, both addresses served calls, no error."""
    go = shutil.which("go")
    assert go is not None, "Go is required by make test-scale"
    binary = tmp_path / "rrload"
    subprocess.run([go, "build", "-o", str(binary), "."], cwd=REPO / "tests" / "bench" / "rrload",
                   check=True, timeout=600)
    artifact = suite_repository / "cf_fp32" / "1"
    case = json.loads((artifact / "manifest.json").read_text())["goldens"][0]
    x = np.load(artifact / case["inputs"]["data_in"]).astype("<f4")
    y = np.load(artifact / case["outputs"]["data_out"]).astype("<f4")
    (tmp_path / "x.f32").write_bytes(x.tobytes())
    (tmp_path / "y.f32").write_bytes(y.tobytes())
    proc = subprocess.run(
        [str(binary), "--targets", ",".join(serve_cluster.front_addresses), "--model", "cf_fp32",
         "--input-name", "data_in", "--input", str(tmp_path / "x.f32"),
         "--shape", ",".join(map(str, x.shape)), "--output", "data_out",
         "--expect", str(tmp_path / "y.f32"), "--concurrency", "4", "--duration", "2s",
         "--warmup", "0s"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    result = json.loads(proc.stdout)
    print(f"rrload over the fronts: {result}")
    assert result["errors"] == {} and result["mismatches"] == 0, result
    assert sorted(result["by_address"]) == sorted(serve_cluster.front_addresses), result
    assert all(n > 0 for n in result["by_address"].values()), result


def test_java_round_robin_reaches_every_front(serve_cluster: ServeCluster) -> None:
    """tests/scale/java/RoundRobin.java (docs/scale-out.md's Java example: a grpc-java name
    resolver holding the addresses, round_robin, jaxport's Java client) against the fronts:
    every answer within tolerance of a front's own answer, both addresses served calls."""
    java, mvn = shutil.which("java"), shutil.which("mvn")
    assert java and mvn, "Java and Maven are required by make test-scale"
    java_dir = REPO / "clients" / "java"
    classpath = java_dir / "target" / "rrload-classpath.txt"
    subprocess.run([mvn, "-B", "-q", "compile", "dependency:build-classpath",
                    f"-Dmdep.outputFile={classpath}", "-Dmdep.includeScope=runtime"],
                   cwd=java_dir, check=True, timeout=STEP_TIMEOUT_S)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    answer = _stub(serve_cluster.front_addresses[0]).ModelInfer(
        pb.ModelInferRequest(model_name="cf_fp32", inputs=[
            pb.ModelInferRequest.InferInputTensor(name="data_in", datatype="FP32", shape=[2, 3])],
            raw_input_contents=[x.tobytes()]), timeout=60)
    expected = np.frombuffer(answer.raw_output_contents[0], "<f4")
    proc = subprocess.run(
        [java, "-cp", f"{java_dir / 'target' / 'classes'}:{classpath.read_text().strip()}",
         str(REPO / "tests" / "scale" / "java" / "RoundRobin.java"), "40",
         ",".join(repr(float(v)) for v in expected), *serve_cluster.front_addresses],
        capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    print(f"Java round_robin over the fronts: {result}")
    assert sorted(result["by_address"]) == sorted(serve_cluster.front_addresses), result
    assert sum(result["by_address"].values()) == 40 and min(result["by_address"].values()) > 0


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
    `inference.*` messages) gets every golden back from a front and through Serve."""
    script = tmp_path / "triton_goldens.py"
    script.write_text(TRITON_SCRIPT)
    for url in (serve_cluster.front_addresses[0], serve_cluster.url):
        for model in ("cf_fp32", "cf_multi"):
            proc = subprocess.run(
                [sys.executable, str(script), url, str(suite_repository / model / "1"), model],
                capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
            assert proc.returncode == 0, proc.stderr[-3000:]
            assert json.loads(proc.stdout.strip().splitlines()[-1])["checked"] >= 2


def _held_stream(stub: pb_grpc.GRPCInferenceServiceStub, n: int) -> tuple[queue.Queue, Any]:
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


def test_proxy_reaches_both_nodes(serve_cluster: ServeCluster) -> None:
    """Through Serve's proxy, placement proven by requests held on the replicas (Serve's proxy
    prefers its own node's replica, so sequential calls can all land on one):
    max_ongoing_requests + 1 streams are opened and held, each answered once. One replica
    takes at most max_ongoing_requests of them, so the last ones must be on the other replica;
    each stream's trailing metadata names the replica and Ray node that served it."""
    stub = _stub(serve_cluster.url)
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
     grpc.StatusCode.UNIMPLEMENTED, refusal("RepositoryModelLoad")),
    ("RepositoryModelUnload", pb.RepositoryModelUnloadRequest(model_name="cf_fp32"),
     grpc.StatusCode.UNIMPLEMENTED, "call each replica's front directly"),
    ("SystemSharedMemoryRegister",
     pb.SystemSharedMemoryRegisterRequest(name="r", key="/r", byte_size=8),
     grpc.StatusCode.UNIMPLEMENTED, "cannot see its /dev/shm"),
    ("SystemSharedMemoryStatus", pb.SystemSharedMemoryStatusRequest(),
     grpc.StatusCode.UNIMPLEMENTED, "SystemSharedMemoryStatus is not supported through Ray"),
])
def test_errors_through_the_proxy(serve_cluster: ServeCluster, rpc: str, request_: object,
                                  code: grpc.StatusCode, words: str) -> None:
    """The front's codes and messages reach a caller of the proxy unchanged; what cannot hold
    across replicas is UNIMPLEMENTED saying why; never a Ray traceback. The same calls to a
    front directly get the front's own answer (here: NOT_FOUND for the model errors)."""
    with pytest.raises(grpc.RpcError) as info:
        getattr(_stub(serve_cluster.url), rpc)(request_, timeout=60)
    assert info.value.code() == code, info.value.details()
    assert words in info.value.details()
    assert not {"Traceback", "RayTaskError", "ActorDiedError"} & set(info.value.details().split())
    if code == grpc.StatusCode.NOT_FOUND:
        with pytest.raises(grpc.RpcError) as direct:
            getattr(_stub(serve_cluster.front_addresses[0]), rpc)(request_, timeout=60)
        assert (direct.value.code(), direct.value.details()) == (code, info.value.details())


def test_server_metadata_through_the_proxy(serve_cluster: ServeCluster) -> None:
    """Through the proxy the extensions it refuses are not claimed; a front claims its own."""
    md = _stub(serve_cluster.url).ServerMetadata(pb.ServerMetadataRequest(), timeout=60)
    assert md.name == "jaxport"
    assert {"model_configuration", "statistics"} <= set(md.extensions)
    assert not {"model_repository", "system_shared_memory"} & set(md.extensions)
    direct = _stub(serve_cluster.front_addresses[0]).ServerMetadata(pb.ServerMetadataRequest(),
                                                                   timeout=60)
    assert set(md.extensions) < set(direct.extensions)
    index = _stub(serve_cluster.url).RepositoryIndex(pb.RepositoryIndexRequest(), timeout=60)
    assert {m.name for m in index.models if m.state == "READY"} >= {"cf_fp32", "cf_multi"}


def test_conformance_runner_on_a_repository_over_http(suite_repository: Path) -> None:
    """The suite's repository behind a real loopback HTTP server (index.json, read-only), served
    by a real `jaxport serve` (every artifact loaded and checksummed over HTTP): the Python
    conformance runner, unchanged, passes the same cases. No cluster needed; it is here
    because it shares the exported suite repository with the cluster tests (replicas on other
    machines read a repository by URL the same way)."""
    from jaxport.artifact import index as index_mod
    from support.bridge import BridgeProcess

    sys.path.insert(0, str(REPO / "tests" / "artifact"))
    from loopback_http import serving

    index_mod.write(suite_repository)
    with serving(suite_repository) as http, BridgeProcess(
            http.url, start_timeout=600) as bridge:
        proc = subprocess.run(
            [sys.executable, str(CONFORMANCE / "runner.py"), "--url", bridge.address,
             "--features", DIRECT_FEATURES],
            cwd=REPO, capture_output=True, text=True, timeout=STEP_TIMEOUT_S)
        fetched = [r for r in http.requests if "/weights/" in r]
    print(proc.stdout[-3000:], proc.stderr[-2000:])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    assert " 0 failed" in proc.stdout
    assert fetched, "no weight chunk was read over HTTP"


def test_cluster_resources(serve_cluster: ServeCluster) -> None:
    """Times, memory and the temp dir (for the report): two nodes, Ray's files under the
    session's own directory; the fronts' own RSS next to Ray's."""
    import psutil

    procs = psutil.Process().children(recursive=True)
    rss = fronts = 0
    for proc in procs:
        try:
            mem = proc.memory_info().rss
            rss += mem
            if proc.name() == "jaxport-front":
                fronts += mem
        except psutil.Error:
            continue
    print(f"cluster start {serve_cluster.start_seconds:.1f} s, deploy (2 replicas, each front "
          f"loading every suite model) {serve_cluster.deploy_seconds:.1f} s; {len(procs)} "
          f"processes, RSS {rss / 2**20:.0f} MiB, of which the 2 fronts {fronts / 2**20:.0f} MiB "
          "(shared pages counted in each)")
    assert any(p.name.startswith("session_") for p in serve_cluster.temp_dir.iterdir())


def _replica_process(front_pid: int) -> Any:
    """The Serve replica process whose front has `front_pid` (its parent)."""
    import psutil

    parent = psutil.Process(front_pid).parent()
    assert parent is not None and "ServeReplica:jaxport" in " ".join(parent.cmdline()), parent
    return parent


def test_replica_killed_under_load(serve_cluster: ServeCluster) -> None:
    """SIGKILL of one replica's process (its front dies with it) while 4 callers keep sending
    over a round_robin channel to both fronts: only the calls in flight on that front fail
    (at most one per caller, UNAVAILABLE), the others are served by the other front, and Serve
    starts a new replica whose front registers and answers. Runs last: it leaves the cluster
    with a new replica."""
    fronts = list(serve_cluster.fronts)
    victim = fronts[0]
    replica = _replica_process(victim["pid"])
    stop = threading.Event()
    lock = threading.Condition()
    outcomes: list[tuple[float, str, str]] = []  # (time, code, details)

    def caller(k: int, channel: grpc.Channel) -> None:
        stub = pb_grpc.GRPCInferenceServiceStub(channel)
        n = 0
        while not stop.is_set():
            n += 1
            try:
                stub.ModelInfer(_fp32_request(k * 1_000_000 + n), timeout=60)
                entry = (time.monotonic(), "OK", "")
            except grpc.RpcError as exc:
                entry = (time.monotonic(), exc.code().name, exc.details() or "")
            with lock:
                outcomes.append(entry)
                lock.notify_all()

    channel = _round_robin([f["grpc"] for f in fronts])
    threads = [threading.Thread(target=caller, args=(k, channel), daemon=True) for k in range(4)]
    for t in threads:
        t.start()
    try:
        with lock:  # steady state
            assert lock.wait_for(lambda: len(outcomes) >= 200, timeout=120)
        killed_at = time.monotonic()
        replica.kill()  # SIGKILL, by pid, a process of this test's own cluster
        with lock:  # the survivor keeps answering
            n_at_kill = len(outcomes)
            assert lock.wait_for(lambda: len(outcomes) >= n_at_kill + 400, timeout=120)
        new = wait_fronts(2, 300, exclude={victim["grpc"]})
        recovered_at = time.monotonic()
        fresh = [f for f in new if f["grpc"] not in {g["grpc"] for g in fronts}]
        assert fresh, new
        ready = _stub(fresh[0]["grpc"]).ModelInfer(_fp32_request(7), timeout=60)
        assert ready.outputs
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=90)
        channel.close()
    after = [o for o in outcomes if o[0] >= killed_at]
    failures = collections.Counter((c, d[:120]) for _, c, d in outcomes if c != "OK")
    print(f"replica kill under load (c=4, direct round_robin): {len(outcomes)} requests, "
          f"{len(after)} after the kill, {sum(failures.values())} failed {dict(failures)}; a new "
          f"front registered {recovered_at - killed_at:.1f} s after the kill")
    assert all(code == "UNAVAILABLE" for code, _ in failures), failures
    assert sum(failures.values()) <= len(threads), failures  # at most the calls in flight
    assert serve_cluster.cluster is not None
