"""`jaxport serve` (bridge/cli.py) is a thin exec of the front: it finds the binary
(`--front-binary`, JAXPORT_FRONT_BINARY, the package's bin/, next to the Python), replaces
itself with it (same PID) passing the user's flags as given plus `--worker-python` (its own
interpreter) unless one was chosen. Every flag is the front's (bridge/front/config, tested
there in Go): `--help` is the Go help, a mistake is the front's one line under the name
`jaxport serve`. What is tested here is the part that is Python's: finding the binary, what
is passed, the exec."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from jaxport.bridge import cli
from support.bridge import BridgeProcess, serve_command


def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("JAXPORT_")}
    return subprocess.run([*serve_command(), *args], capture_output=True, text=True,
                          timeout=120, env={**clean, **(env or {})})


def one_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def front(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The front `jaxport serve` finds (as users run it: make setup / make front put it next to
    the venv's Python, the platform wheel in the package)."""
    binary, named_by = cli.front_binary([], {})
    assert cli.binary_problem(binary, named_by) is None, cli.binary_problem(binary, named_by)
    return binary


@pytest.mark.parametrize(("args", "env", "line"), [
    (("--front-binary", "/mistyped/path"), {},
     "jaxport serve: error: --front-binary /mistyped/path: no such file"),
    (("--front-binary=/mistyped/path",), {},
     "jaxport serve: error: --front-binary /mistyped/path: no such file"),
    ((), {"JAXPORT_FRONT_BINARY": "/mistyped/path"},
     "jaxport serve: error: JAXPORT_FRONT_BINARY=/mistyped/path: no such file"),
])
def test_a_mistyped_front_binary_is_no_such_file(args, env, line, repository: Path) -> None:
    """Issue 37: a path that does not exist is "no such file", not "is not built"."""
    proc = serve("--repository", str(repository), *args, env=env)
    assert proc.returncode == 1
    assert one_line(proc) == line


def test_a_front_binary_that_cannot_run(tmp_path: Path, repository: Path) -> None:
    plain = tmp_path / "jaxport-front"
    plain.write_text("not a program")
    for path in (plain, tmp_path):
        proc = serve("--repository", str(repository), "--front-binary", str(path))
        assert proc.returncode == 1
        assert one_line(proc) == (f"jaxport serve: error: --front-binary {path}: not an "
                                  "executable file")


def test_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--front-binary, then JAXPORT_FRONT_BINARY, then the package's front when executable,
    then jaxport-front next to this Python; an unbuilt default names `make front`."""
    packaged = tmp_path / "bin" / "jaxport-front"
    monkeypatch.setattr(cli, "PACKAGED_FRONT", packaged)
    beside = Path(sys.executable).parent / "jaxport-front"
    assert cli.front_binary([], {}) == (beside, None)  # a checkout: no front in the package
    packaged.parent.mkdir()
    packaged.write_bytes(b"")
    assert cli.front_binary([], {}) == (beside, None)  # not executable: not a front
    packaged.chmod(0o755)
    assert cli.front_binary([], {}) == (packaged, None)
    env = {"JAXPORT_FRONT_BINARY": "/e/front"}
    assert cli.front_binary([], env) == (Path("/e/front"), "JAXPORT_FRONT_BINARY=/e/front")
    assert cli.front_binary(["--front-binary", "/f/front"], env) == (
        Path("/f/front"), "--front-binary /f/front")
    # Flags in full only (the front refuses abbreviations), the last one wins.
    assert cli.front_binary(["--front-bin", "/x", "--front-binary=/a", "--front-binary", "/b"],
                            {}) == (Path("/b"), "--front-binary /b")
    missing = tmp_path / "nowhere" / "jaxport-front"
    assert cli.binary_problem(missing, None) == (
        f"the native front {missing} is not built: run `make front` (needs Go), or install "
        "jaxport's platform wheel (it carries the front)")


def test_worker_python_is_added_unless_chosen() -> None:
    assert cli.front_argv(["--repository", "r"], {}) == [
        "jaxport serve", "--repository", "r", "--worker-python", sys.executable]
    assert cli.front_argv(["--repository", "r", "--worker-python", "/p"], {}) == [
        "jaxport serve", "--repository", "r", "--worker-python", "/p"]
    assert cli.front_argv(["--worker-python=/p"], {}) == ["jaxport serve", "--worker-python=/p"]
    assert cli.front_argv([], {"JAXPORT_WORKER_PYTHON": "/p"}) == ["jaxport serve"]


def test_help_and_mistakes_are_the_fronts(front: Path, repository: Path) -> None:
    """The help is the Go one (every flag, from bridge/front/config); a usage mistake is the
    front's one line, exit 2, under the name `jaxport serve`."""
    helped = serve("--help")
    assert helped.returncode == 0, helped.stderr
    assert helped.stdout.startswith("usage: jaxport serve --repository DIR|URL")
    for flag in ("--model-control-mode", "--load-model", "--worker-python", "--front-binary"):
        assert f"  {flag} " in helped.stdout
    flat = helped.stdout.replace("\n", "").replace(" ", "")
    assert all(f'"{key}":' in flat for key in ("grpc_port", "metrics_port", "http_port", "pid"))
    proc = serve("--repo", str(repository))
    assert proc.returncode == 2
    assert one_line(proc) == ("jaxport serve: error: unrecognized argument: --repo (see "
                              "`jaxport serve --help`)")
    proc = serve("--repository", str(repository), "--worker-threads", "8")
    assert proc.returncode == 2
    assert one_line(proc).startswith("jaxport serve: error: --worker-threads "
                                     "(JAXPORT_WORKER_THREADS) was removed: the front admits")


def test_serve_execs_the_front(front: Path, artifacts: dict[str, Path], tmp_path: Path,
                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Same PID (the port file's pid is the process `jaxport serve` started), the front's
    binary, the user's flags as given and --worker-python this interpreter (added only when
    JAXPORT_WORKER_PYTHON does not name one, which tests/tiers.py sets); a repository the
    native engine serves whole leaves no Python process in the server's tree."""
    import psutil
    from bridge_helpers import make_repository

    monkeypatch.delenv("JAXPORT_WORKER_PYTHON", raising=False)

    repository = make_repository(tmp_path / "repo", artifacts, {"mlp": [1]})
    with BridgeProcess(repository, "--http-port", "-1", workdir=tmp_path / "serve") as server:
        assert json.loads(server.port_file.read_text())["pid"] == server.pid
        proc = psutil.Process(server.pid)
        assert Path(proc.exe()).resolve() == front.resolve()
        argv = proc.cmdline()
        assert argv[0] == "jaxport serve"
        assert argv[-2] == "--worker-python"  # the interpreter jaxport serve ran on
        assert os.path.samefile(argv[-1], sys.executable), argv[-1]
        assert argv[1:3] == ["--repository", str(repository)]
        tree = [proc, *proc.children(recursive=True)]
        assert not [p for p in tree if "python" in p.name().lower()], [p.cmdline() for p in tree]
