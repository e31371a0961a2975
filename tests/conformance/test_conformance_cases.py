"""The committed conformance cases are exactly what JAX computes from the suite models today,
and every runner-facing field is well formed (the runners themselves run in `make conformance`)."""

from __future__ import annotations

import importlib.util
import json
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
# Loaded under a unique name: other test directories may have their own `runner`/`models`.
_spec = importlib.util.spec_from_file_location("jaxport_conformance_runner", HERE / "runner.py")
assert _spec is not None and _spec.loader is not None
runner = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = runner  # dataclasses look their module up there
_spec.loader.exec_module(runner)
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
import expectations  # noqa: E402  (numpy only: the check's rule without JAX)
from jaxport_conformance import rest  # noqa: E402


def test_committed_cases_match_jax() -> None:
    done = subprocess.run([sys.executable, str(HERE / "make_cases.py"), "--check"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr


def _perturbed(tmp_path: Path, rel: str, change) -> Path:
    """A copy of the committed cases with one data file's array changed by `change`."""
    copy = tmp_path / "cases"
    shutil.copytree(runner.DEFAULT_CASES, copy)
    array = np.load(copy / rel)
    np.save(copy / rel, change(array.copy()), allow_pickle=False)
    return copy


def test_check_moves_one_ulp_and_fails_a_wrong_value(tmp_path: Path) -> None:
    """make_cases.py --check's rule on perturbed copies of the committed cases (the committed
    tree stands in for JAX's fresh one): a float output one ulp away is reported as moved (case,
    output, ulps) and passes; a really wrong float, an integer output off by one, and an input
    one ulp away each fail, naming the file or case."""
    cases = runner.DEFAULT_CASES
    assert expectations.compare_trees(cases, cases) == expectations.Comparison([], [], [])
    rel = "data/infer_batch_4_of_4.expected.data_out.npy"

    def one_ulp(a: np.ndarray) -> np.ndarray:
        a.flat[5] = np.nextafter(a.flat[5], np.float32(np.inf))
        return a

    result = expectations.compare_trees(cases, _perturbed(tmp_path / "ulp", rel, one_ulp))
    assert result.bad == [] and result.moved_files == [rel]
    (moved,) = result.moved
    assert "infer_batch_4_of_4 output data_out" in moved and "1 of 12 elements" in moved
    assert "(1 ulp)" in moved
    assert expectations.report(result)[0] == 0

    def wrong(a: np.ndarray) -> np.ndarray:
        a.flat[5] += np.float32(0.01)
        return a

    result = expectations.compare_trees(cases, _perturbed(tmp_path / "wrong", rel, wrong))
    (bad,) = result.bad
    assert "infer_batch_4_of_4 output data_out" in bad and "outside the tolerance" in bad
    assert "flat index 5" in bad and expectations.report(result)[0] == 1
    for name, rel, change, named in (
            ("int", "data/infer_int32_raw.expected.data_out.npy", lambda a: a + 1,
             "differs: data/infer_int32_raw.expected.data_out.npy"),
            ("input", "data/infer_fp32_raw.data_in.npy", one_ulp,
             "differs: data/infer_fp32_raw.data_in.npy"),
            # an exponent bit of a BF16 pattern: the value doubles or halves
            ("bf16", "data/infer_bf16_raw.expected.data_out.npy", lambda a: a ^ 0x0080,
             "case infer_bf16_raw output data_out (BF16): outside the tolerance")):
        result = expectations.compare_trees(cases, _perturbed(tmp_path / name, rel, change))
        assert len(result.bad) == 1 and result.bad[0].startswith(named), (name, result.bad)


def test_ulp_distance() -> None:
    one = np.array([1.0, -1.0, 0.0, np.nan], np.float32)
    up = np.array([np.nextafter(np.float32(1), np.float32(2)), np.float32(-1),
                   np.float32(-0.0), np.nan], np.float32)
    assert expectations.ulp_distance(one, up).tolist() == [1, 0, 0, 0]
    tiny = np.array([np.float32(1e-45)], np.float32)  # the smallest subnormal
    assert expectations.ulp_distance(tiny, -tiny).tolist() == [2]


def test_cases_cover_the_issue_list() -> None:
    names = {c["name"] for c in runner.load_cases(runner.DEFAULT_CASES)}
    for dt in ("fp32", "fp64", "fp16", "bf16", "int8", "int32", "int64", "uint8", "bool"):
        assert f"infer_{dt}_raw" in names
    for required in ("health_server_live", "health_server_ready", "health_model_ready",
                     "metadata_server", "metadata_model_multi", "infer_multi_io",
                     "infer_multi_requested_subset", "infer_fp32_typed", "infer_parallel",
                     "infer_16mib", "stream_infer", "error_unknown_model", "error_wrong_shape",
                     "error_wrong_datatype", "error_byte_size_mismatch", "error_missing_input",
                     "check_tripped",
                     # issue 14: what Triton's own tools rely on
                     "infer_batch_2_of_4", "infer_batch_3_of_4", "error_batch_beyond_max",
                     "infer_bool_nonzero_bytes", "classify_fp32", "classify_int64",
                     "classify_labels", "classify_bool_refused", "stream_final_response",
                     "cuda_shm_status_empty", "cuda_shm_unregister_all",
                     "cuda_shm_unregister_unknown", "cuda_shm_register_refused",
                     "cuda_shm_status_unknown"):
        assert required in names


def test_protocol_only_cases_name_no_suite_model() -> None:
    for case in runner.load_cases(runner.DEFAULT_CASES):
        if not case["requires"]:
            assert "cf_" not in json.dumps(case["request"]), case["name"]


def test_every_case_names_known_features_and_the_core_profile_exists() -> None:
    """requires lists only FEATURES; the core profile (requires []) covers health, server
    metadata and every unknown-model error, ModelReady of one included (issue 19)."""
    cases = runner.load_cases(runner.DEFAULT_CASES)
    for case in cases:
        assert set(case["requires"]) <= set(runner.FEATURES), case["name"]
        if "cf_" in json.dumps(case["request"]):
            assert "jaxport-models" in case["requires"], case["name"]
    core = {c["name"] for c in cases if not c["requires"]}
    assert core == {"health_server_live", "health_server_ready", "metadata_server",
                    "metadata_unknown_model", "error_unknown_model", "error_model_ready_unknown"}
    by_name = {c["name"]: c for c in cases}
    for name, feature in (("error_unknown_version", "versions"), ("stream_infer", "triton-stream"),
                          ("infer_bf16_raw", "bf16"), ("check_tripped", "checkify"),
                          ("infer_version_explicit", "versions")):
        assert feature in by_name[name]["requires"], name


def test_comparison_fails_on_a_wrong_value() -> None:
    spec = {"name": "y", "datatype": "FP32", "shape": [2], "rtol": 1e-6, "atol": 1e-6}
    want = np.array([1.0, 2.0], np.float32).tobytes()
    runner.compare_tensor(spec, np.array([1.0, 2.000001], np.float32), want)
    with pytest.raises(runner.CaseFailure, match="outside"):
        runner.compare_tensor(spec, np.array([1.0, 2.1], np.float32), want)
    ints = {"name": "n", "datatype": "INT64", "shape": [1], "rtol": 0.0, "atol": 0.0}
    with pytest.raises(runner.CaseFailure, match="flat index 0"):
        runner.compare_tensor(ints, np.array([2**53], np.int64),
                              np.array([2**53 + 1], np.int64).tobytes())


def test_error_check_needs_code_and_named_field() -> None:
    expect = {"code": "INVALID_ARGUMENT", "message_contains": ["data_in"]}
    runner.check_error(expect, "INVALID_ARGUMENT", "input 'data_in': expected shape [2, 3]")
    with pytest.raises(runner.CaseFailure):
        runner.check_error(expect, "NOT_FOUND", "input 'data_in'")
    with pytest.raises(runner.CaseFailure):
        runner.check_error(expect, "INVALID_ARGUMENT", "bad input")


def test_missing_toolchains_fail_loudly(tmp_path: Path) -> None:
    """With neither Go nor Java/Maven on PATH, make conformance names both and fails."""
    done = subprocess.run([sys.executable, str(HERE / "run.py")], capture_output=True,
                          text=True, timeout=120, env={"PATH": str(tmp_path)})
    assert done.returncode == 1
    assert "Go toolchain not found" in done.stderr
    assert "Java not found" in done.stderr and "Maven not found" in done.stderr
    assert "no language is skipped" in done.stderr


def test_comparison_of_special_values() -> None:
    spec = {"name": "y", "datatype": "FP32", "shape": [2], "rtol": 1e-6, "atol": 1e-6}
    want = np.array([np.inf, np.nan], np.float32).tobytes()
    runner.compare_tensor(spec, np.array([np.inf, np.nan], np.float32), want)
    for wrong in ([-np.inf, np.nan], [np.inf, 0.0]):
        with pytest.raises(runner.CaseFailure):
            runner.compare_tensor(spec, np.array(wrong, np.float32), want)


@pytest.mark.slow  # waits out a 10 s step timeout by design: make test-all
def test_a_hung_step_is_killed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """run.py never waits forever on a runner: past the step timeout its group is killed."""
    spec = importlib.util.spec_from_file_location("jaxport_conformance_run", HERE / "run.py")
    assert spec is not None and spec.loader is not None
    run = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run)
    # Long enough for `sh` to print on a loaded machine; the grandchild sleeps far longer.
    monkeypatch.setattr(run, "STEP_TIMEOUT_S", 10.0)
    log: list[str] = []
    # Killed, not waited for, and the whole group: a grandchild (`sh -c ...` below, which run.py
    # also waits for, through the output pipe it holds) would leave `finished` behind once its
    # sleep ended. Its absence proves that, where a clock (< 30 s) only suggested it.
    finished = tmp_path / "finished"
    grandchild = shlex.quote(f"sleep 60; touch {shlex.quote(str(finished))}; :")
    rc = run.run_step("hang", ["sh", "-c", f"echo started; sh -c {grandchild}; :"], HERE, log)
    assert rc == -signal.SIGKILL, rc
    assert not finished.exists(), "the step's process group outlived the timeout"
    assert log == ["started\n"]


def test_every_case_says_which_rule_it_checks() -> None:
    """Each case's basis: a level of features.json ("required" by the protocol text, "triton"
    for Triton's documented extensions, "implementation-defined" where the protocol leaves the
    answer open) and the sources it cites, each in the table with its words."""
    table = json.loads((HERE / "features.json").read_text())
    levels, sources = table["levels"], table["sources"]
    assert set(levels) == {"required", "triton", "implementation-defined"}
    for source in sources.values():
        assert source["document"] and source["section"] and source["says"]
    cited = set()
    for case in runner.load_cases(runner.DEFAULT_CASES):
        basis = case["basis"]
        assert basis["level"] in levels, case["name"]
        assert basis["sources"] and set(basis["sources"]) <= set(sources), case["name"]
        cited |= set(basis["sources"])
        # a core case is a protocol rule or one Triton answers the same way, and its REST
        # form is plain JSON (no binary data extension)
        if not case["requires"]:
            assert basis["level"] != "triton", case["name"]
            assert not rest.transport_requires(case), case["name"]
        for alternative in case["expect"].get("alternatives", []):
            assert alternative["code"] and case["rpc"] in ("ModelReady", "ServerLive",
                                                           "ServerReady", "ModelMetadata",
                                                           "ServerMetadata"), case["name"]
    assert cited == set(sources)  # no source nobody cites
