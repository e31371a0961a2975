"""`jaxport verify` says what it is doing on a terminal (a line as the checks start, one as
each finishes) and is silent in logs and pipes, or with --quiet: the real command with stderr
on a pseudo-terminal, then on a pipe."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest

JAXPORT = Path(sys.executable).parent / "jaxport"
CHECKS = "checksums,jaxexport"


def verify_on_a_terminal(art: Path, *extra: str, checks: str = CHECKS
                         ) -> tuple[int, str, str]:
    """(exit status, stdout, what reached the terminal) of `jaxport verify` with stderr on a
    pseudo-terminal."""
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen([str(JAXPORT), "verify", str(art), "--checks", checks, *extra],
                                stdout=subprocess.PIPE, stderr=follower, text=True,
                                env={**os.environ, "JAX_PLATFORMS": "cpu"})
    finally:
        os.close(follower)
    terminal = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: every writer of the terminal is gone
            break
        if not chunk:
            break
        terminal += chunk
    os.close(leader)
    stdout = proc.stdout.read() if proc.stdout else ""
    return proc.wait(timeout=600), stdout, terminal.decode().replace("\r\n", "\n")


@pytest.fixture(scope="module")
def art(artifacts) -> Path:
    return artifacts("mlp")


def test_progress_per_check_on_a_terminal(art: Path) -> None:
    status, stdout, terminal = verify_on_a_terminal(art)
    assert status == 0, (stdout, terminal)
    lines = [line for line in terminal.splitlines() if line.strip()]
    assert lines[0] == "jaxport verify: finding the platforms present here (jax in a fresh " \
                       "process)"
    assert lines[1] == (f"jaxport verify: running 2 check(s) of {art}, each in a "
                        "fresh process, 2 at a time: checksums, jaxexport")
    done = [re.fullmatch(r"jaxport verify: \[(\d)/2\] (\S+): PASS \((\d+\.\d) s\)", line)
            for line in lines[2:]]
    assert all(done) and len(done) == 2, lines
    assert [m.group(1) for m in done] == ["1", "2"]
    assert sorted(m.group(2) for m in done) == ["checksums", "jaxexport"]
    # The table and the verdict stay on stdout, after the progress.
    assert stdout.splitlines()[0].split()[:2] == ["check", "output"]
    assert stdout.rstrip().endswith(f"jaxport verify: OK ({art})")


def test_quiet_on_a_terminal(art: Path) -> None:
    status, stdout, terminal = verify_on_a_terminal(art, "--quiet", checks="checksums")
    assert status == 0, (stdout, terminal)
    assert "jaxport verify:" not in terminal
    assert stdout.rstrip().endswith(f"jaxport verify: OK ({art})")


def test_silent_when_stderr_is_not_a_terminal(art: Path) -> None:
    done = subprocess.run([str(JAXPORT), "verify", str(art), "--checks", "checksums"],
                          capture_output=True, text=True, timeout=600,
                          env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert done.stdout.rstrip().endswith(f"jaxport verify: OK ({art})")
