"""What `jaxport infer` / `jaxport model` tell a user who points them at the wrong port, asks
for classes, or wonders why a model is not served natively: the real commands (subprocesses)
against a REAL `jaxport serve` of their own with REST on (the session bridge has none); and
`jaxport.artifact`'s `call` answering every batch size the server answers, as it does.

The model: a 3-class softmax exported with batch sizes 1 and 4 and labels, so the server's
classification is per batch row and carries the labels."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from jaxport.client import InferenceClient
from support.bridge import BridgeProcess

JAXPORT = Path(sys.executable).parent / "jaxport"
LABELS = ["cat", "dog", "bird"]
W = np.array([[1.0, -1.0, 0.5], [0.0, 2.0, -2.0]], np.float32)
X = np.array([[2.0, 0.0], [0.0, 1.0]], np.float32)  # row 0 ranks cat first, row 1 dog


def classify(params: dict[str, Any], x: jax.Array) -> jax.Array:
    return jax.nn.softmax(x @ params["w"], axis=-1)


def jaxport(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(JAXPORT), *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and done.stdout == "", (done.stdout, done.stderr)
    return lines[0]


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from jaxport.exporter import export

    root = tmp_path_factory.mktemp("cli-server")
    (root / "labels.txt").write_text("\n".join(LABELS) + "\n")
    export(classify, {"w": W}, {"x": jax.ShapeDtypeStruct((1, 2), np.float32)},
           root / "repo" / "clf" / "1", output_names=("probs",), goldens=1, quiet=True,
           batch_sizes=(1, 4), labels={"probs": root / "labels.txt"})
    return root / "repo"


@pytest.fixture(scope="module")
def bridge(repo: Path) -> Iterator[BridgeProcess]:
    with BridgeProcess(repo, "--http-port", "0") as b:
        yield b


@pytest.fixture(scope="module")
def x_npy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("cli-server-x") / "x.npy"
    np.save(path, X)
    return path


def ports(bridge: BridgeProcess) -> dict[str, int]:
    return json.loads(bridge.port_file.read_text())


def test_url_given_the_rest_port(bridge: BridgeProcess, x_npy: Path) -> None:
    """The REST port answers HTTP/1.1: one line saying it is REST and which flag is gRPC."""
    rest = f"127.0.0.1:{ports(bridge)['http_port']}"
    done = jaxport("infer", "--url", rest, "--model", "clf", "--input", f"x=@{x_npy}")
    assert done.returncode == 1
    assert one_error_line(done) == (
        f"jaxport infer: error: --url {rest} is the server's REST port (it answers HTTP/1.1 "
        "GET /v2); --url takes the gRPC address HOST:PORT (jaxport serve --port, default "
        "8001; REST is --http-port, default 8000)")
    done = jaxport("model", "list", "--url", rest)
    assert done.returncode == 1
    assert one_error_line(done).startswith(f"jaxport model: error: --url {rest} is the "
                                           "server's REST port")


def test_url_given_the_metrics_port(bridge: BridgeProcess, x_npy: Path) -> None:
    """Another HTTP/1 server (the metrics port): not gRPC, and which flags are which."""
    metrics = f"127.0.0.1:{bridge.metrics_port}"
    done = jaxport("infer", "--url", metrics, "--model", "clf", "--input", f"x=@{x_npy}")
    assert done.returncode == 1
    assert one_error_line(done) == (
        f"jaxport infer: error: --url {metrics} answers HTTP/1.1, not gRPC (a REST, metrics "
        "or other HTTP port); --url takes the server's gRPC address HOST:PORT (jaxport serve "
        "--port, default 8001; REST --http-port 8000, metrics --metrics-port 8002)")


def test_client_refuses_a_url_target() -> None:
    """The library says the same at construction (gRPC would answer 'Misformatted domain
    name' on the first call)."""
    with pytest.raises(ValueError, match=r"^target 'http://127\.0\.0\.1:8000' is a URL; a gRPC "
                       r"address is HOST:PORT with no scheme, e\.g\. '127\.0\.0\.1:8000'"):
        InferenceClient("http://127.0.0.1:8000")


def test_grpc_port_still_answers_and_nothing_listening_is_unavailable(
        bridge: BridgeProcess, x_npy: Path, tmp_path: Path) -> None:
    """The probe only explains what answers HTTP/1: a closed port stays gRPC's UNAVAILABLE."""
    done = jaxport("infer", "--url", bridge.address, "--model", "clf", "--input", f"x=@{x_npy}")
    assert done.returncode == 0, done.stderr
    done = jaxport("infer", "--url", "127.0.0.1:1", "--model", "clf", "--input", f"x=@{x_npy}")
    assert done.returncode == 1
    assert one_error_line(done).startswith("jaxport infer: error: UNAVAILABLE: ")


def expected_rows() -> list[list[tuple[str, int, float]]]:
    """(label, index, score) per row, best first, from JAX."""
    probs = np.asarray(classify({"w": W}, X))
    return [[(LABELS[i], int(i), float(row[i])) for i in np.argsort(-row, kind="stable")]
            for row in probs]


def test_classes_prints_label_and_score_per_row(bridge: BridgeProcess, x_npy: Path) -> None:
    done = jaxport("infer", "--url", bridge.address, "--model", "clf", "--input", f"x=@{x_npy}",
                   "--classes", "2")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[:2] == ["model clf version 1", "  probs  top 2 classes"]
    rows = lines[2:]
    assert len(rows) == 2
    for i, (line, want) in enumerate(zip(rows, expected_rows(), strict=True)):
        prefix = f"    row {i}: "
        assert line.startswith(prefix), line
        entries = line[len(prefix):].split("; ")
        assert len(entries) == 2
        for entry, (label, index, score) in zip(entries, want[:2], strict=True):
            name, value, klass = entry.split(" ", 2)
            assert (name, klass) == (label, f"(class {index})"), line
            assert float(value) == pytest.approx(score, abs=1e-5), line


def test_classes_json_is_the_servers_entries(bridge: BridgeProcess, x_npy: Path) -> None:
    done = jaxport("infer", "--url", bridge.address, "--model", "clf", "--input", f"x=@{x_npy}",
                   "--classes", "3", "--output", "probs", "--json")
    assert done.returncode == 0, done.stderr
    (out,) = json.loads(done.stdout)["outputs"]
    assert (out["name"], out["datatype"], out["shape"]) == ("probs", "BYTES", [2, 3])
    entries = [e.split(":") for e in out["data"]]
    want = [e for row in expected_rows() for e in row]
    assert [(label, int(index)) for _, index, label in entries] == \
        [(label, index) for label, index, _ in want]
    np.testing.assert_allclose([float(v) for v, _, _ in entries], [s for _, _, s in want],
                               atol=1e-5)


def test_model_list_reason_is_the_model_configs(bridge: BridgeProcess) -> None:
    """REASON of a READY version is its ModelConfig parameter `reason` (why the server does
    not execute it natively; absent when it does): the same text in the table and in --json."""
    with InferenceClient(bridge.address) as client:
        params = client.model_config("clf", "1").parameters
    engine = params["engine"].string_value
    reason = params["reason"].string_value if "reason" in params else ""
    done = jaxport("model", "list", "--url", bridge.address, "--json")
    assert done.returncode == 0, done.stderr
    (entry,) = [json.loads(line) for line in done.stdout.splitlines()]
    assert entry == {"name": "clf", "version": "1", "state": "READY", "engine": engine,
                     "reason": reason}
    done = jaxport("model", "list", "--url", bridge.address)
    assert done.returncode == 0, done.stderr
    header, row = done.stdout.splitlines()
    assert header.split() == ["MODEL", "VERSION", "STATE", "ENGINE", "REASON"]
    assert row.split(maxsplit=4)[:4] == ["clf", "1", "READY", engine]
    assert row.split(maxsplit=4)[4:] == ([reason] if reason else [])


def test_model_list_table_shows_the_reason_column() -> None:
    """The table itself: a READY version's reason from its config, an unavailable one's from
    the repository index, the columns aligned."""
    from jaxport.client import ModelIndex
    from jaxport.client.cli import index_text

    entries = [ModelIndex("mlp", "1", "READY", ""), ModelIndex("seq", "2", "READY", ""),
               ModelIndex("broken", "1", "UNAVAILABLE", "manifest.json: not JSON")]
    served = {("mlp", "1"): ("native", ""),
              ("seq", "2"): ("exported", "symbolic dimensions without bucket programs")}
    assert index_text(entries, served).splitlines() == [
        "MODEL   VERSION  STATE        ENGINE    REASON",
        "mlp     1        READY        native",
        "seq     2        READY        exported  symbolic dimensions without bucket programs",
        "broken  1        UNAVAILABLE  -         manifest.json: not JSON",
    ]


@pytest.mark.parametrize("rows", [1, 2, 3, 4])
def test_artifact_call_and_the_server_agree_on_every_batch_size(
        bridge: BridgeProcess, repo: Path, rows: int) -> None:
    """One batch-size rule (docs/artifact-format.md, Batching): `jaxport.artifact.open(dir)
    .call` answers 2 and 3 rows as the server does (on the 4-row program, padded), not an
    error. Tolerance: the server runs the program through the PJRT C API, `call` through
    jax.export, both XLA:CPU; only fusion choices differ."""
    import jaxport.artifact

    x = np.linspace(-2.0, 2.0, rows * 2, dtype=np.float32).reshape(rows, 2)
    local = jaxport.artifact.open(repo / "clf" / "1").call(x=x)["probs"]
    with InferenceClient(bridge.address) as client:
        served = client.infer("clf", {"x": x})["probs"]
    assert local.shape == served.shape == (rows, 3)
    np.testing.assert_allclose(local, served, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(local, np.asarray(classify({"w": W}, x)), rtol=1e-5, atol=1e-6)


def test_infer_classes_through_the_clients(bridge: BridgeProcess) -> None:
    """`infer(classes={output: k})` on both clients: Triton's classification, BYTES entries
    `value:index:label` per row, best first; a count below 1 is refused naming the output
    before anything is sent."""
    import asyncio

    from jaxport.client import AsyncInferenceClient
    from jaxport.protocol.errors import InvalidArgumentError

    want = [[f"{score:.6f}:{index}:{label}".encode() for label, index, score in row[:2]]
            for row in expected_rows()]

    def entries(array: np.ndarray) -> list[list[bytes]]:
        assert array.dtype == object and array.shape == (2, 2)
        return [[bytes(v) for v in row] for row in array]

    def close(got: list[list[bytes]]) -> None:
        for got_row, want_row in zip(got, want, strict=True):
            for g, w in zip(got_row, want_row, strict=True):
                gv, gi, gl = g.split(b":")
                wv, wi, wl = w.split(b":")
                assert (gi, gl) == (wi, wl)
                assert float(gv) == pytest.approx(float(wv), abs=2e-6)

    with InferenceClient(bridge.address) as client:
        result = client.infer("clf", {"x": X}, classes={"probs": 2})
        assert list(result.outputs) == ["probs"]
        close(entries(result["probs"]))
        with pytest.raises(InvalidArgumentError, match=r"^requested output 'probs': class "
                           r"count must be an integer >= 1, got 0$"):
            client.infer("clf", {"x": X}, classes={"probs": 0})

    async def run() -> np.ndarray:
        async with AsyncInferenceClient(bridge.address) as client:
            return (await client.infer("clf", {"x": X}, classes={"probs": 2}))["probs"]

    close(entries(asyncio.run(run())))
