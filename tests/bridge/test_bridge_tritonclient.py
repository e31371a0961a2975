"""Interop with `tritonclient[grpc]` 2.41 (run in a subprocess: its protobuf `inference.*`
symbols clash with our generated ones in one process). See `triton_interop.py`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from support.bridge import BridgeProcess

SCRIPT = Path(__file__).with_name("triton_interop.py")


def test_tritonclient_interop(repository: Path, bridge: BridgeProcess):
    """On the shared server (explicit model control): the script unloads `mlp` and loads it
    again, leaving the server as it found it."""
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--url", bridge.address, "--repository", str(repository)],
        capture_output=True, text=True, timeout=180,
    )
    assert bridge.alive()
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "ALL PASS" in proc.stdout and "FAIL" not in proc.stdout
    passed = [line for line in proc.stdout.splitlines() if line.startswith("PASS ")]
    for required in ("is_server_live", "is_server_ready", "is_model_ready(mlp)",
                     "get_model_metadata(mixed) inputs", "get_model_config(mixed)",
                     "mlp/case0/output", "mixed/case0/h", "mixed/case0/s", "mixed/case0/m",
                     "get_model_repository_index", "unload_model(mlp)", "load_model(mlp)",
                     "stream: bad request reported, stream continued"):
        assert f"PASS {required}" in passed, output
