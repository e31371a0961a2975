"""`jaxport infer` and the `jaxport` dispatcher, run as real subprocesses."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from client_helpers import Server

JAXPORT = Path(sys.executable).parent / "jaxport"


def jaxport(*args: str | Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(JAXPORT), *map(str, args)], capture_output=True, text=True, timeout=timeout
    )


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The single stderr line of a failed command (and nothing on stdout, no traceback)."""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert done.stdout == ""
    return lines[0]


@pytest.fixture(scope="module")
def npys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("npy")
    arrays = {
        "x": np.arange(6, dtype=np.float32).reshape(2, 3),
        "h": np.array([1.5, np.nan, -np.inf], dtype=ml_dtypes.bfloat16),
        "b": np.array([True, False]),
        "i": np.array([-(2**62), 3], dtype=np.int64),
    }
    paths = {}
    for name, a in arrays.items():
        paths[name] = d / f"{name}.npy"
        np.save(paths[name], a)
    paths["pickled"] = d / "pickled.npy"
    np.save(paths["pickled"], np.array([{"a": 1}], dtype=object), allow_pickle=True)
    paths["complex"] = d / "complex.npy"
    np.save(paths["complex"], np.zeros(2, np.complex64))
    return paths


def test_infer_prints_outputs(server: Server, npys: dict[str, Path]) -> None:
    done = jaxport("infer", "--url", server.url, "--model", "echo",
                   "--input", f"x=@{npys['x']}", "--input", f"b=@{npys['b']}")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "model echo version 1"
    assert lines[1].split()[:5] == ["x", "FP32", "[2,", "3]", "min=0"]
    assert "max=5" in lines[1] and "values=[0., 1., 2., 3., 4., 5.]" in lines[1]
    assert lines[2].split()[:3] == ["b", "BOOL", "[2]"] and "true=1/2" in lines[2]


def test_infer_json(server: Server, npys: dict[str, Path]) -> None:
    done = jaxport("infer", "--url", server.url, "--model", "echo", "--json", "--id", "r7",
                   "--input", f"x=@{npys['x']}", "--input", f"h=@{npys['h']}",
                   "--input", f"i=@{npys['i']}")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["model_name"], doc["model_version"], doc["id"]) == ("echo", "1", "r7")
    out = {o["name"]: o for o in doc["outputs"]}
    assert out["x"] == {"name": "x", "datatype": "FP32", "shape": [2, 3],
                        "data": [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]}
    assert out["h"]["datatype"] == "BF16"
    assert out["h"]["data"] == [1.5, "NaN", "-Infinity"]
    assert out["i"]["data"] == [-(2**62), 3]


def test_raw_void_npy_is_read_as_the_declared_datatype(
    server: Server, npys: dict[str, Path], tmp_path: Path
) -> None:
    """bf16 .npy files hold `<V2` (numpy has no bf16 descriptor); the model says what it is.

    The test server declares 'x' FP32 and 'h' BF16: 4-byte raw values for 'x' become FP32,
    2-byte ones are refused naming both sizes (BF16 for 'h' is test_infer_json)."""
    four = tmp_path / "v4.npy"
    np.save(four, np.array([1.5, -2.0], "<f4").view("V4"))
    done = jaxport("infer", "--url", server.url, "--model", "echo", "--json",
                   "--input", f"x=@{four}")
    assert done.returncode == 0, done.stderr
    (out,) = json.loads(done.stdout)["outputs"]
    assert (out["datatype"], out["data"]) == ("FP32", [1.5, -2.0])
    done = jaxport("infer", "--url", server.url, "--model", "echo", "--input", f"x=@{npys['h']}")
    assert done.returncode == 1
    assert one_error_line(done) == (
        "jaxport infer: error: input 'x': the .npy holds raw 2-byte values; model 'echo' "
        "declares FP32 (4 bytes per element)"
    )
    done = jaxport("infer", "--url", server.url, "--model", "echo", "--input", f"z=@{npys['h']}")
    assert done.returncode == 1
    assert "input 'z'" in one_error_line(done) and "declares no input" in done.stderr


def test_infer_output_subset_and_typed(server: Server, npys: dict[str, Path]) -> None:
    done = jaxport("infer", "--url", server.url, "--model", "echo", "--json", "--typed",
                   "--input", f"x=@{npys['x']}", "--input", f"b=@{npys['b']}", "--output", "b")
    assert done.returncode == 0, done.stderr
    assert [o["name"] for o in json.loads(done.stdout)["outputs"]] == ["b"]


def test_server_error_is_one_line_with_code_and_message(
    server: Server, npys: dict[str, Path]
) -> None:
    done = jaxport("infer", "--url", server.url, "--model", "nope", "--input", f"x=@{npys['x']}")
    assert done.returncode == 1
    assert one_error_line(done) == (
        "jaxport infer: error: NOT_FOUND: model 'nope' not found; available: echo"
    )
    done = jaxport("infer", "--url", server.url, "--model", "echo",
                   "--input", f"x=@{npys['x']}", "--output", "zz")
    assert done.returncode == 1
    assert one_error_line(done) == (
        "jaxport infer: error: INVALID_ARGUMENT: unknown requested output 'zz'"
    )


def test_unreachable_server(npys: dict[str, Path]) -> None:
    done = jaxport("infer", "--url", "127.0.0.1:1", "--model", "m", "--timeout", "10",
                   "--input", f"x=@{npys['x']}")
    assert done.returncode == 1
    assert one_error_line(done).startswith("jaxport infer: error: UNAVAILABLE: ")


def test_token_file(token_server: Server, npys: dict[str, Path], tmp_path: Path) -> None:
    args = ("infer", "--url", token_server.url, "--model", "echo", "--input", f"x=@{npys['x']}")
    done = jaxport(*args)
    assert done.returncode == 1
    assert one_error_line(done) == (
        "jaxport infer: error: UNAUTHENTICATED: missing or invalid bearer token"
    )
    (tmp_path / "token").write_text("s3cret\n")
    done = jaxport(*args, "--token-file", tmp_path / "token")
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize(
    ("args", "status", "needle"),
    [
        (["--input", "x"], 2, "--input 'x': expected NAME=@FILE.npy"),
        (["--input", "x=file.npy"], 2, "expected NAME=@FILE.npy"),
        (["--input", "x=@/nonexistent/x.npy"], 1, "input 'x': cannot read /nonexistent/x.npy"),
        (["--input", "p=@{pickled}"], 1, "input 'p': cannot read"),
        (["--input", "c=@{complex}"], 1, "input 'c': unsupported dtype 'complex64'"),
        (["--input", "x=@{x}", "--input", "x=@{x}"], 2, "--input 'x' given twice"),
        (["--input", "x=@{x}", "--cert", "c.pem"], 2, "--cert and --key must be given together"),
        (["--input", "x=@{x}", "--timeout", "soon"], 2, "argument --timeout: invalid float"),
    ],
)
def test_user_mistakes(
    server: Server, npys: dict[str, Path], args: list[str], status: int, needle: str
) -> None:
    args = [a.format(**{k: str(v) for k, v in npys.items()}) for a in args]
    done = jaxport("infer", "--url", server.url, "--model", "echo", *args)
    assert done.returncode == status
    line = one_error_line(done)
    assert line.startswith("jaxport infer: error: ") and needle in line, line


def test_missing_required_flags_is_usage() -> None:
    done = jaxport("infer", "--url", "x:1")
    assert done.returncode == 2
    assert "--model" in one_error_line(done)


def test_infer_help() -> None:
    done = jaxport("infer", "--help")
    assert done.returncode == 0
    for flag in ("--url", "--model", "--model-version", "--input", "--output", "--json",
                 "--timeout"):
        assert flag in done.stdout


# --- dispatcher ---------------------------------------------------------------------------


def test_help_lists_every_subcommand() -> None:
    for flag in ("--help", "-h"):
        done = jaxport(flag)
        assert done.returncode == 0
        for command in ("export", "verify", "serve", "infer"):
            assert f"  {command} " in done.stdout


def test_version() -> None:
    done = jaxport("--version")
    assert done.returncode == 0
    assert done.stdout.startswith("jaxport ") and "jaxport-client 0.1.0" in done.stdout


def test_no_command_is_usage() -> None:
    done = jaxport()
    assert done.returncode == 2
    assert "usage: jaxport <command>" in done.stderr


def test_unknown_command() -> None:
    done = jaxport("frobnicate")
    assert done.returncode == 2
    assert one_error_line(done) == (
        "jaxport: error: unknown command 'frobnicate'; expected one of export, verify, serve, "
        "infer (see `jaxport --help`)"
    )


def test_infer_does_not_import_jax() -> None:
    code = (
        "import sys; from jaxport.cli import main; rc = main(['infer', '--help']); "
        "sys.exit(3 if 'jax' in sys.modules else rc)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
