"""Start/stop the protocol test server (oip_test_server.py) as a real process on port 0.

A uniquely named module (not conftest) so test files can import it whatever other
conftest.py files are loaded in the same pytest run.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

SERVER = Path(__file__).with_name("oip_test_server.py")


@dataclass
class Server:
    url: str
    process: subprocess.Popen[str]


def start_server(*args: str) -> Server:
    """Start oip_test_server.py and read the port it bound from its first stdout line."""
    process = subprocess.Popen(
        [sys.executable, str(SERVER), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line.startswith("PORT "):
        process.kill()
        _, err = process.communicate(timeout=10)
        raise RuntimeError(f"test server did not start: {line!r} {err}")
    return Server(f"127.0.0.1:{int(line.split()[1])}", process)


def stop_server(server: Server) -> None:
    """Stop by PID (our own Popen), never by name."""
    server.process.terminate()
    try:
        server.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.process.kill()
        server.process.wait(timeout=10)
