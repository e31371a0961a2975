"""Soak: 64 concurrent callers against one live bridge on loopback for >= 60 s (bounded in
time and count). Reports requests, errors by status, p50/p99 latency and server RSS at start
and end; every request must get its own correct answer (zero lost responses) and no error.

Run with `make soak` (or `pytest -m soak -o addopts='' -s tests/reliability/test_soak.py`).
JAXPORT_SOAK_SECONDS overrides the duration (minimum 60 for the real thing).
"""

from __future__ import annotations

import collections
import os
import threading
import time

import grpc
import numpy as np
import pytest
from bridge_launch import rss_kib, start_bridge
from jaxport.protocol.gen.inference import grpc_service_pb2 as pb
from live import fuzzy_request, make_repository, output, slow_request, stub
from rel_models import FUZZ_MODEL, SLOW_MODEL, fuzzy_expected

CONCURRENCY = 64
SECONDS = float(os.environ.get("JAXPORT_SOAK_SECONDS", "60"))
MAX_REQUESTS = 5_000_000  # bound on count, whatever the speed
SLOW_EVERY = 10  # one request in ten runs the `slow` model (200 rounds), the rest `fuzzy`


@pytest.mark.soak
@pytest.mark.timeout(int(SECONDS) + 240)
def test_soak_concurrency_64(tmp_path, artifacts) -> None:
    repo = make_repository(tmp_path / "repo", artifacts, [FUZZ_MODEL, SLOW_MODEL])
    # A line long enough that all 64 callers are admitted or queued, never shed (the front's
    # admission: --max-inflight-per-model running + --max-queue-per-model waiting).
    with start_bridge(repo, "--max-queue-per-model", str(CONCURRENCY)) as b:
        channel = b.channel()
        s = stub(channel)
        s.ModelInfer(fuzzy_request(), timeout=30)
        rss_start = rss_kib(b.pid)
        lock = threading.Lock()
        sent = [0]
        errors: collections.Counter[str] = collections.Counter()
        wrong: list[str] = []
        latencies: list[list[float]] = [[] for _ in range(CONCURRENCY)]
        slow_latencies: list[list[float]] = [[] for _ in range(CONCURRENCY)]
        stop_at = time.monotonic() + SECONDS

        def caller(k: int) -> None:
            rng = np.random.default_rng(k)
            i = 0
            while time.monotonic() < stop_at:
                with lock:
                    if sent[0] >= MAX_REQUESTS:
                        return
                    sent[0] += 1
                rid = f"{k}-{i}"
                i += 1
                slow = i % SLOW_EVERY == 0
                if slow:
                    req = slow_request(200, rid)
                else:
                    x = rng.standard_normal((2, 3)).astype(np.float32)
                    flag = rng.random(2) > 0.5
                    req = fuzzy_request(x, flag, rid)
                t0 = time.perf_counter()
                try:
                    resp = s.ModelInfer(req, timeout=30)
                except grpc.RpcError as exc:
                    with lock:
                        errors[exc.code().name] += 1
                    continue
                latencies[k].append(time.perf_counter() - t0)
                if slow:
                    slow_latencies[k].append(latencies[k][-1])
                if resp.id != rid:
                    wrong.append(f"{rid} answered as {resp.id}")
                elif not slow and not np.array_equal(output(resp), fuzzy_expected(x, flag)):
                    wrong.append(f"{rid} wrong values")

        t_start = time.monotonic()
        threads = [threading.Thread(target=caller, args=(k,)) for k in range(CONCURRENCY)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(SECONDS + 120)
        elapsed = time.monotonic() - t_start
        rss_end = rss_kib(b.pid)
        server_side = []
        for m in s.ModelStatistics(pb.ModelStatisticsRequest(), timeout=10).model_stats:
            st = m.inference_stats
            n = max(st.success.count, 1)
            server_side.append(f"{m.name}: {st.success.count} ok, mean queue "
                               f"{st.queue.ns / n / 1e6:.2f} ms, compute "
                               f"{st.compute_infer.ns / n / 1e6:.2f} ms")
        alive = b.alive()
        channel.close()
    lat = np.array([x for per in latencies for x in per])
    slow_lat = np.array([x for per in slow_latencies for x in per])
    ok = lat.size
    print(
        f"\nsoak: {CONCURRENCY} callers x {elapsed:.1f} s: {sent[0]} requests, {ok} ok "
        f"({ok / elapsed:.0f}/s), errors {dict(errors) or 0}, wrong answers {len(wrong)}; "
        f"latency p50 {np.percentile(lat, 50) * 1e3:.2f} ms p99 {np.percentile(lat, 99) * 1e3:.2f}"
        f" ms max {lat.max() * 1e3:.1f} ms (slow model p50 {np.percentile(slow_lat, 50) * 1e3:.2f}"
        f" ms p99 {np.percentile(slow_lat, 99) * 1e3:.2f} ms)"
        f"; server RSS {rss_start / 1024:.0f} -> "
        f"{rss_end / 1024:.0f} MiB; server side: {'; '.join(server_side)}"
    )
    assert alive
    assert not any(t.is_alive() for t in threads)
    assert ok + sum(errors.values()) == sent[0], "a request got neither answer nor status"
    assert not errors, f"unexpected errors: {dict(errors)}"
    assert not wrong, wrong[:5]
    assert rss_end < rss_start + 512 * 1024, "server memory grew by more than 512 MiB"
