"""The bench's 16 MiB Go tool (`tests/bench/wire`, issue 12; vetted and built once by
tests/tiers.py) run for real: its grpc-go echo server answers the Go client over a socket, and
the client's answer check fails (status 1, naming the element) when the answer is not what it
expects, so the bench's large tensor figures can only come from correct answers."""

from __future__ import annotations

import json
import subprocess

from support import binaries


def test_wire_echo_round_trips_and_checks_answers() -> None:
    binary = binaries.path("wire")
    for tuned in ([], ["--tuned"]):
        server = subprocess.Popen([str(binary), "echo", *tuned], stdout=subprocess.PIPE,
                                  text=True)
        try:
            assert server.stdout is not None
            target = server.stdout.readline().strip()
            assert target.startswith("127.0.0.1:"), target
            ok = subprocess.run([str(binary), "call", "--target", target, "--expect", "echo",
                                 "--mib", "1", "--n", "2", *tuned],
                                capture_output=True, text=True, timeout=120)
            assert ok.returncode == 0, ok.stderr
            latencies = json.loads(ok.stdout)["latencies_ms"]
            assert len(latencies) == 2 and all(ms > 0 for ms in latencies)
            # The echo answers y = x, not the elementwise model's 2x + 0.5: the check must fail.
            bad = subprocess.run([str(binary), "call", "--target", target, "--expect",
                                  "affine", "--mib", "1", "--n", "1"],
                                 capture_output=True, text=True, timeout=120)
            assert bad.returncode == 1
            assert "y[0] = -1, want -1.5" in bad.stderr, bad.stderr
        finally:
            server.terminate()
            server.wait(timeout=30)
