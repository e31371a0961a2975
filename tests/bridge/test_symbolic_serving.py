"""A shape-polymorphic model served at ANY admissible size (issue 16, symbolic dimensions).

`tests/models/seq.py` (tokens:int32[B,T], mask:bool[B,T]) exported once with
`dims={"B": "1..64", "T": "8..2048:8"}` is loaded by a real `jaxport serve` (the native front,
what a client sees) and called by `jaxport.client` at three lengths; the answers are compared
with the original function jitted by JAX here at the same concrete shape, within rtol 1e-5 /
atol 1e-6 (float32: the bridge runs jax's own compilation of the deserialized polymorphic
program, so only XLA's fusion choices can differ; a wrong weight or a misplaced mask moves the
answers by O(0.1)). Sizes outside the rules are INVALID_ARGUMENT from `Model.prepare`, naming the
input, the dimension and the rule. The engine's per-shape executable cache is an LRU (checked
in-process on the same artifact); `--batching` refuses the model at load with one line naming
the way out. `--engine pjrt` serves the bucket programs of `seqb` (the same model exported with
`--buckets T=128,512 --batch-sizes 2 --pad T=mask`): at a bucket size, and at a shorter T padded
up to the next bucket (mask False there, outputs sliced back), both equal to the unpadded jax
function (the raw `.mlirbc` through PJRT: rtol 1e-5 / atol 1e-6 as well); a size no bucket
holds is INVALID_ARGUMENT naming the buckets, and a model without buckets is refused at load.
"""

from __future__ import annotations

import sys
from pathlib import Path

import grpc
import jax
import numpy as np
import pytest
from bridge_helpers import EXPLICIT
from jaxport.client import InferenceClient, InferenceServerError
from support.bridge import BridgeProcess

MODELS = Path(__file__).resolve().parents[1] / "models"
if str(MODELS) not in sys.path:
    sys.path.insert(0, str(MODELS))
import seq  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6


@pytest.fixture(scope="session")
def seq_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from jaxport.exporter import export

    repo = tmp_path_factory.mktemp("symbolic_repo")
    for name, extra in (("seq", {}), ("seqb", {"buckets": {"T": [128, 512]},
                                              "batch_sizes": [2], "padding": {"T": "mask"}})):
        export(seq.predict, seq.init(jax.random.key(0)),
               {"tokens": (("B", "T"), np.int32), "mask": (("B", "T"), np.bool_)},
               repo / name / "1", dims={"B": "1..64", "T": "8..2048:8"}, goldens=0,
               quiet=True, name=name, **extra)
    return repo


@pytest.fixture(scope="module")
def bridge(seq_repo: Path):
    with BridgeProcess(seq_repo, "--engine", "exported") as server:
        yield server


def _inputs(b: int, t: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = rng.random((b, t)) < 0.8
    mask[:, 0] = True
    return {"tokens": rng.integers(0, seq.VOCAB, (b, t)).astype(np.int32), "mask": mask}


def test_served_at_three_lengths_equals_the_jax_function(bridge: BridgeProcess) -> None:
    params = seq.init(jax.random.key(0))
    reference = jax.jit(seq.predict)
    with InferenceClient(bridge.address) as client:
        for i, (b, t) in enumerate([(1, 8), (3, 136), (2, 2048)]):
            inputs = _inputs(b, t, i)
            got = client.infer("seq", inputs).outputs
            want = reference(params, inputs["tokens"], inputs["mask"])
            assert got["per_token"].shape == (b, t, seq.WIDTH)
            assert got["pooled"].shape == (b, seq.WIDTH)
            for key in ("per_token", "pooled"):
                np.testing.assert_allclose(got[key], np.asarray(want[key]), rtol=RTOL,
                                           atol=ATOL, err_msg=f"{key} at B={b} T={t}")


def test_metadata_and_config_report_minus_one_for_symbolic_dims(bridge: BridgeProcess) -> None:
    with InferenceClient(bridge.address) as client:
        meta = client.model_metadata("seq")
        config = client.model_config("seq")
    assert {t.name: t.shape for t in meta.inputs} == {"tokens": (-1, -1), "mask": (-1, -1)}
    assert {t.name: t.shape for t in meta.outputs} == {"per_token": (-1, -1, seq.WIDTH),
                                                        "pooled": (-1, seq.WIDTH)}
    assert {i.name: list(i.dims) for i in config.input} == {"tokens": [-1, -1],
                                                           "mask": [-1, -1]}
    assert config.max_batch_size == 0


@pytest.mark.parametrize(
    ("b", "t", "t_mask", "needles"),
    [
        (2, 12, 12, ["input 'tokens' dimension 1 (T) is 12", "T must be a multiple of 8 in "
                     "8..2048"]),
        (2, 4096, 4096, ["input 'tokens' dimension 1 (T) is 4096",
                         "T must be a multiple of 8 in 8..2048"]),
        (65, 8, 8, ["input 'tokens' dimension 0 (B) is 65", "B must be in 1..64"]),
        (2, 16, 24, ["input 'mask' dimension 1 (T) is 24 but input 'tokens' has T = 16"]),
    ],
)
def test_a_size_outside_the_rule_is_invalid_argument(bridge: BridgeProcess, b: int, t: int,
                                                     t_mask: int, needles: list[str]) -> None:
    inputs = {"tokens": np.zeros((b, t), np.int32), "mask": np.ones((b, t_mask), bool)}
    with InferenceClient(bridge.address) as client, \
            pytest.raises(InferenceServerError) as info:
        client.infer("seq", inputs)
    assert info.value.status_code == grpc.StatusCode.INVALID_ARGUMENT
    message = str(info.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message


def test_batching_refuses_the_model_at_load(seq_repo: Path) -> None:
    with BridgeProcess(seq_repo, "--batching", *EXPLICIT) as server, \
            InferenceClient(server.address) as client:
        for name in ("seq", "seqb"):
            with pytest.raises(InferenceServerError) as info:
                client.load_model(name)
            assert info.value.status_code == grpc.StatusCode.FAILED_PRECONDITION
            for needle in [f"model '{name}'", "symbolic dimensions (B, T)", "dynamic batching",
                           "--batching"]:
                assert needle in str(info.value), str(info.value)
            assert not client.model_ready(name)


def test_pjrt_engine_serves_the_buckets_padding_t_up_to_them(seq_repo: Path) -> None:
    params = seq.init(jax.random.key(0))
    reference = jax.jit(seq.predict)
    with BridgeProcess(seq_repo, "--engine", "pjrt", *EXPLICIT) as server, \
            InferenceClient(server.address) as client:
        assert client.model_metadata("seqb").inputs[0].shape == (-1, -1)
        for i, t in enumerate((128, 512, 136, 8)):  # 136 runs padded to 512, 8 to 128
            inputs = _inputs(2, t, 10 + i)
            got = client.infer("seqb", inputs).outputs
            want = reference(params, inputs["tokens"], inputs["mask"])
            for key in ("per_token", "pooled"):
                np.testing.assert_allclose(got[key], np.asarray(want[key]), rtol=RTOL,
                                           atol=ATOL, err_msg=f"{key} at T={t}")
        for b, t in ((2, 1024), (3, 128)):  # admissible, but no bucket holds it (B: no --pad)
            with pytest.raises(InferenceServerError) as info:
                client.infer("seqb", _inputs(b, t, 0))
            assert info.value.status_code == grpc.StatusCode.INVALID_ARGUMENT
            for needle in [f"sizes B={b}, T={t} have no bucket program", "--engine pjrt",
                           "B=2, T=128; B=2, T=512, T padded up to them", "--engine exported"]:
                assert needle in str(info.value), str(info.value)
        with pytest.raises(InferenceServerError) as info:  # the rule still comes first
            client.infer("seqb", _inputs(2, 12, 0))
        assert info.value.status_code == grpc.StatusCode.INVALID_ARGUMENT
        assert "T must be a multiple of 8 in 8..2048" in str(info.value)
        with pytest.raises(InferenceServerError) as info:  # no buckets: refused at load
            client.load_model("seq")
        assert info.value.status_code == grpc.StatusCode.FAILED_PRECONDITION
        for needle in ["symbolic dimensions (B, T) and no bucket program", "--engine pjrt",
                       "--engine exported", "--buckets"]:
            assert needle in str(info.value), str(info.value)


def test_compiled_shapes_are_an_lru(seq_repo: Path) -> None:
    """What a worker executes (`jaxport.bridge.loading`, in process): jax compiles one
    executable per concrete shape of a polymorphic program, and the engine keeps the most
    recent `compiled_shapes` (`--compiled-shapes`, 2 here), recompiling an evicted shape on its
    next request."""
    from jaxport.bridge import engines
    from jaxport.bridge.loading import load

    loaded = load(seq_repo / "seq" / "1", engine="exported", compiled_shapes=2)
    (program,) = loaded.programs.values()
    assert program.polymorphic
    engine = program.engine
    assert isinstance(engine, engines.PolymorphicEngine)
    assert engine.compilations == 1  # the warm-up, at every dimension's minimum
    assert engine.cached_shapes() == [((1, 8), (1, 8))]

    def run(b: int, t: int) -> None:
        inputs = _inputs(b, t, 0)
        results = program.execute([inputs["tokens"], inputs["mask"]])
        assert any(r.shape == (b, t, seq.WIDTH) for r in results), [r.shape for r in results]

    run(2, 16)
    run(2, 24)  # evicts (1, 8)
    assert engine.compilations == 3
    assert engine.cached_shapes() == [((2, 16), (2, 16)), ((2, 24), (2, 24))]
    run(2, 16)  # a hit: no compilation, now most recent
    assert engine.compilations == 3
    run(1, 8)  # evicted before: compiled again, evicting (2, 24)
    assert engine.compilations == 4
    assert engine.cached_shapes() == [((2, 16), (2, 16)), ((1, 8), (1, 8))]
