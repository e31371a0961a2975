"""`jaxport infer` and the `jaxport` dispatcher, run as real subprocesses against a REAL
bridge; outputs compared with the model function run by JAX in this process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from client_helpers import assert_matches_jax
from client_models import MIXED_OUTPUTS, run_jax
from jaxport.protocol import dtypes
from support.bridge import BridgeProcess
from support.certs import Pki

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


def jax_json(data: list[object]) -> np.ndarray:
    """A `--json` data list back to float64 (NaN/inf are spelled as strings there)."""
    return np.array([float(v) for v in data], dtype=np.float64)


@pytest.fixture(scope="module")
def npys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("npy")
    a = (np.arange(12, dtype=np.float32).reshape(3, 4) / 4 - 1).astype(ml_dtypes.bfloat16)
    a[1, 2] = np.nan
    arrays = {
        "x": np.arange(6, dtype=np.float32).reshape(2, 3),
        "h": np.array([[1.5, np.nan, -np.inf], [0.0, 2.0, -3.0]], dtype=ml_dtypes.bfloat16),
        "b": np.array([[True, False, True], [False, False, False]]),
        "i": np.array([[-(2**62), 3, 2**40], [0, -1, 7]], dtype=np.int64),
        "a": a,
        "idx": np.array([-(2**40), 0, 2**35 + 1], dtype=np.int64),
        "flag": np.array([True, True, False]),
    }
    paths = {}
    for name, array in arrays.items():
        paths[name] = d / f"{name}.npy"
        np.save(paths[name], array)
    paths["pickled"] = d / "pickled.npy"
    np.save(paths["pickled"], np.array([{"a": 1}], dtype=object), allow_pickle=True)
    paths["complex"] = d / "complex.npy"
    np.save(paths["complex"], np.zeros(2, np.complex64))
    return paths


def load(path: Path) -> np.ndarray:
    """What the test wrote (bf16 .npy files hold raw `<V2`: viewed back as bf16)."""
    array = np.load(path)
    return array.view(ml_dtypes.bfloat16) if array.dtype == np.dtype("V2") else array


def test_infer_prints_outputs(bridge: BridgeProcess, npys: dict[str, Path]) -> None:
    done = jaxport("infer", "--url", bridge.address, "--model", "echo_fp32",
                   "--input", f"x=@{npys['x']}")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "model echo_fp32 version 1"
    assert lines[1].split()[:5] == ["y", "FP32", "[2,", "3]", "min=0"]
    assert "max=5" in lines[1] and "values=[0., 1., 2., 3., 4., 5.]" in lines[1]
    done = jaxport("infer", "--url", bridge.address, "--model", "echo_bool",
                   "--input", f"x=@{npys['b']}")
    assert done.returncode == 0, done.stderr
    line = done.stdout.splitlines()[1]
    assert line.split()[:4] == ["y", "BOOL", "[2,", "3]"] and "true=2/6" in line


def test_infer_json_matches_jax(bridge: BridgeProcess, npys: dict[str, Path]) -> None:
    """`mixed` (BF16 .npy read as raw V2, INT64 beyond 2**53, BOOL) against JAX in-process."""
    done = jaxport("infer", "--url", bridge.address, "--model", "mixed", "--json", "--id", "r7",
                   "--input", f"a=@{npys['a']}", "--input", f"idx=@{npys['idx']}",
                   "--input", f"flag=@{npys['flag']}")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["model_name"], doc["model_version"], doc["id"]) == ("mixed", "1", "r7")
    inputs = {n: load(npys[n]) for n in ("a", "idx", "flag")}
    want = dict(zip(MIXED_OUTPUTS, run_jax("mixed", inputs), strict=True))
    out = {o["name"]: o for o in doc["outputs"]}
    assert list(out) == list(MIXED_OUTPUTS)
    for name, array in want.items():
        assert out[name]["datatype"] == dtypes.by_numpy(array.dtype).datatype, name
        assert out[name]["shape"] == list(array.shape), name
    assert "NaN" in out["h"]["data"]  # the NaN in `a` reaches h, spelled as the REST API does
    got_h = jax_json(out["h"]["data"]).reshape(want["h"].shape).astype(ml_dtypes.bfloat16)
    assert_matches_jax(got_h, want["h"], "h")
    assert out["s"]["data"] == want["s"].ravel().tolist()
    assert out["m"]["data"] == want["m"].ravel().tolist()


def test_infer_json_bf16_specials(bridge: BridgeProcess, npys: dict[str, Path]) -> None:
    done = jaxport("infer", "--url", bridge.address, "--model", "echo_bf16", "--json",
                   "--input", f"x=@{npys['h']}")
    assert done.returncode == 0, done.stderr
    (out,) = json.loads(done.stdout)["outputs"]
    assert (out["name"], out["datatype"], out["shape"]) == ("y", "BF16", [2, 3])
    assert out["data"] == [1.5, "NaN", "-Infinity", 0.0, 2.0, -3.0]


def test_raw_void_npy_is_read_as_the_declared_datatype(
    bridge: BridgeProcess, npys: dict[str, Path], tmp_path: Path
) -> None:
    """bf16 .npy files hold `<V2` (numpy has no bf16 descriptor); the model says what it is.

    `echo_fp32` declares 'x' FP32: 4-byte raw values become FP32, 2-byte ones are refused
    naming both sizes (BF16 read as BF16 is test_infer_json_*)."""
    four = tmp_path / "v4.npy"
    values = np.array([[1.5, -2.0, 0.0], [3.0, 4.0, -0.5]], "<f4")
    np.save(four, values.view("V4"))
    done = jaxport("infer", "--url", bridge.address, "--model", "echo_fp32", "--json",
                   "--input", f"x=@{four}")
    assert done.returncode == 0, done.stderr
    (out,) = json.loads(done.stdout)["outputs"]
    (want,) = run_jax("echo_fp32", {"x": values})
    assert (out["datatype"], out["data"]) == ("FP32", want.ravel().tolist())
    done = jaxport("infer", "--url", bridge.address, "--model", "echo_fp32",
                   "--input", f"x=@{npys['h']}")
    assert done.returncode == 1
    assert one_error_line(done) == (
        "jaxport infer: error: input 'x': the .npy holds raw 2-byte values; model 'echo_fp32' "
        "declares FP32 (4 bytes per element)"
    )
    done = jaxport("infer", "--url", bridge.address, "--model", "echo_fp32",
                   "--input", f"z=@{npys['h']}")
    assert done.returncode == 1
    assert "input 'z'" in one_error_line(done) and "declares no input" in done.stderr


def test_infer_output_subset(bridge: BridgeProcess, npys: dict[str, Path]) -> None:
    done = jaxport("infer", "--url", bridge.address, "--model", "mixed", "--json",
                   "--input", f"a=@{npys['a']}", "--input", f"idx=@{npys['idx']}",
                   "--input", f"flag=@{npys['flag']}", "--output", "m")
    assert done.returncode == 0, done.stderr
    (out,) = json.loads(done.stdout)["outputs"]
    inputs = {n: load(npys[n]) for n in ("a", "idx", "flag")}
    want = dict(zip(MIXED_OUTPUTS, run_jax("mixed", inputs), strict=True))
    assert (out["name"], out["data"]) == ("m", want["m"].tolist())


def test_infer_typed(bridge: BridgeProcess, npys: dict[str, Path]) -> None:
    done = jaxport("infer", "--url", bridge.address, "--model", "echo_int64", "--json",
                   "--typed", "--input", f"x=@{npys['i']}")
    assert done.returncode == 0, done.stderr
    (out,) = json.loads(done.stdout)["outputs"]
    (want,) = run_jax("echo_int64", {"x": np.load(npys["i"])})
    assert (out["datatype"], out["data"]) == ("INT64", want.ravel().tolist())


def test_server_error_is_one_line_with_code_and_message(
    bridge: BridgeProcess, npys: dict[str, Path]
) -> None:
    done = jaxport("infer", "--url", bridge.address, "--model", "nope",
                   "--input", f"x=@{npys['x']}")
    assert done.returncode == 1
    assert one_error_line(done).startswith(
        "jaxport infer: error: NOT_FOUND: unknown model 'nope' (known models: ")
    done = jaxport("infer", "--url", bridge.address, "--model", "echo_fp32",
                   "--input", f"x=@{npys['x']}", "--output", "zz")
    assert done.returncode == 1
    assert one_error_line(done) == (
        "jaxport infer: error: INVALID_ARGUMENT: unknown requested output 'zz': model "
        "'echo_fp32' (version 1) has outputs 'y'"
    )
    done = jaxport("infer", "--url", bridge.address, "--model", "echo_fp32",
                   "--input", f"x=@{npys['b']}")
    assert done.returncode == 1
    line = one_error_line(done)
    assert line.startswith("jaxport infer: error: INVALID_ARGUMENT: ") and "input 'x'" in line


def test_unreachable_server(npys: dict[str, Path]) -> None:
    done = jaxport("infer", "--url", "127.0.0.1:1", "--model", "m", "--timeout", "10",
                   "--input", f"x=@{npys['x']}")
    assert done.returncode == 1
    assert one_error_line(done).startswith("jaxport infer: error: UNAVAILABLE: ")


def test_token_file_and_mutual_tls(
    secure_bridge: BridgeProcess, pki: Pki, token_file: Path, npys: dict[str, Path]
) -> None:
    base = ("infer", "--url", secure_bridge.address, "--model", "echo_fp32",
            "--input", f"x=@{npys['x']}", "--ca", pki.ca_cert)
    tls = ("--cert", pki.client_cert, "--key", pki.client_key)
    done = jaxport(*base, *tls)
    assert done.returncode == 1
    assert one_error_line(done) == (
        "jaxport infer: error: UNAUTHENTICATED: missing or invalid bearer token: send metadata "
        "'authorization: Bearer <token>'"
    )
    done = jaxport(*base, *tls, "--token-file", token_file, "--json")
    assert done.returncode == 0, done.stderr
    (out,) = json.loads(done.stdout)["outputs"]
    assert out["data"] == np.load(npys["x"]).ravel().tolist()
    done = jaxport(*base, "--token-file", token_file, "--timeout", "10")
    assert done.returncode == 1
    assert one_error_line(done).startswith("jaxport infer: error: UNAVAILABLE: ")


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
    bridge: BridgeProcess, npys: dict[str, Path], args: list[str], status: int, needle: str
) -> None:
    args = [a.format(**{k: str(v) for k, v in npys.items()}) for a in args]
    done = jaxport("infer", "--url", bridge.address, "--model", "echo_fp32", *args)
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
        for command in ("export", "verify", "serve", "infer", "model"):
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
        "pjrt, infer, model (see `jaxport --help`)"
    )


def test_infer_does_not_import_jax() -> None:
    code = (
        "import sys; from jaxport.cli import main; rc = main(['infer', '--help']); "
        "sys.exit(3 if 'jax' in sys.modules else rc)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
