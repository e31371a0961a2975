"""ghz, the load generator of `make bench`: pinned (GHZ_VERSION), `go install`ed into
build/bench/bin when missing; closed loop, one connection, one pre-serialized binary request;
server CPU per request from /proc (the server's process and its children) around the measured
run. ghz never looks at answers: every server's answer is checked against JAX before its load
(`check_answer`)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from tests.bench import servers, sysinfo

GHZ_VERSION = "v0.93.0"
GHZ_PACKAGE = "github.com/bojand/ghz/cmd/ghz"
MODEL_INFER = "inference.GRPCInferenceService.ModelInfer"
ROOT = servers.ROOT


def ensure() -> Path:
    """build/bench/bin/ghz at GHZ_VERSION."""
    ghz = servers.BIN / "ghz"
    stamp = servers.BIN / "ghz.version"
    if ghz.exists() and stamp.exists() and stamp.read_text().strip() == GHZ_VERSION:
        return ghz
    servers.BIN.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([servers.go(), "install", f"{GHZ_PACKAGE}@{GHZ_VERSION}"],
                          env={**os.environ, "GOBIN": str(servers.BIN), "GOFLAGS": "-mod=mod"},
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise servers.BenchSetupError(f"go install {GHZ_PACKAGE}@{GHZ_VERSION} failed: {last}")
    stamp.write_text(GHZ_VERSION + "\n")
    return ghz


def run(ghz: Path, target: str, data: Path, concurrency: int, seconds: float) -> dict:
    """One closed-loop ghz run; its JSON report. Calls still running when the time is up
    finish (--duration-stop ignore) so none counts as an error."""
    cmd = [str(ghz), "--insecure", "--proto", str(ROOT / "proto/inference/grpc_service.proto"),
           "--import-paths", str(ROOT / "proto"), "--call", MODEL_INFER, "--binary",
           "--binary-file", str(data), "-c", str(concurrency), "--connections", "1",
           "-z", f"{seconds}s", "--format", "json", "--timeout", "60s",
           "--duration-stop", "ignore", target]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 180)
    if proc.returncode != 0 and not proc.stdout.strip():
        raise RuntimeError(f"ghz failed: {proc.stderr.strip()[-500:]}")
    return json.loads(proc.stdout)


def measure(ghz: Path, srv: servers.Server, data: Path, concurrency: int, seconds: float,
            warmup: float) -> dict[str, Any]:
    """A warm-up run, then one measured run: req/s, p50/p99 ms, errors, server CPU ms per
    completed request (the server's process tree)."""
    run(ghz, srv.target, data, concurrency, warmup)
    cpu0 = sum(sysinfo.tree_cpu_s(srv.pid))
    rep = run(ghz, srv.target, data, concurrency, seconds)
    cpu1 = sum(sysinfo.tree_cpu_s(srv.pid))
    lat = {int(d["percentage"]): d["latency"] / 1e6
           for d in rep.get("latencyDistribution") or []}
    codes = rep.get("statusCodeDistribution") or {}
    ok = int(codes.get("OK", 0))
    return {
        "concurrency": concurrency,
        "requests": ok,
        "rps": float(rep.get("rps", 0.0)) * ok / max(int(rep.get("count", 0)), 1),
        "p50_ms": lat.get(50),
        "p99_ms": lat.get(99),
        "errors": sum(int(v) for k, v in codes.items() if k != "OK"),
        "first_error": next(iter(rep.get("errorDistribution") or {}), ""),
        "cpu_ms_per_req": 1e3 * (cpu1 - cpu0) / ok if ok else None,
        "loadavg_1m": os.getloadavg()[0],
    }


def check_answer(target: str, raw: bytes, expected: np.ndarray, name: str = "y",
                 rtol: float = 1e-4, atol: float = 1e-4) -> None:
    """The server's answer to `raw` (output `name`, FP32) equals JAX's within rtol/atol."""
    import grpc
    from jaxport.protocol.gen.inference import grpc_service_pb2 as pb

    with grpc.insecure_channel(target, options=[("grpc.max_receive_message_length",
                                                 256 << 20)]) as ch:
        got = ch.unary_unary("/" + MODEL_INFER.replace(".ModelInfer", "/ModelInfer"))(
            raw, timeout=120)
    resp = pb.ModelInferResponse.FromString(got)
    names = [o.name for o in resp.outputs]
    if name not in names:
        raise AssertionError(f"{target}: no output {name!r} in the answer (outputs {names})")
    i = names.index(name)
    if resp.raw_output_contents:
        y = np.frombuffer(resp.raw_output_contents[i], "<f4")
    else:
        y = np.asarray(resp.outputs[i].contents.fp32_contents, np.float32)
    y = y.reshape(expected.shape) if y.size == expected.size else y
    if y.shape != expected.shape or not np.allclose(y, expected, rtol=rtol, atol=atol):
        worst = (float(np.max(np.abs(y - expected))) if y.shape == expected.shape
                 else f"shape {y.shape}")
        raise AssertionError(f"{target}: answer differs from JAX (max |diff| {worst}, "
                             f"shape {expected.shape})")
