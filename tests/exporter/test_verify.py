"""`jaxport verify`: consumer-side proof on PJRT and IREE, refusal of damaged artifacts, and a
fresh `python -I` process that runs an artifact with only jax + tensorstore + numpy."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from exporter_helpers import REPO, export_model, run_cli
from jaxport.artifact import manifest
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter import verify
from jaxport.exporter.cli import verify_main


def _verify(art: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str]:
    rc = verify_main([str(art), *extra])
    out = capsys.readouterr()
    return rc, out.out + out.err


@pytest.mark.parametrize("model", [
    # verify's isolation, proved once: each check in a fresh `python -I` process, where the
    # model's module cannot be imported (the others run their checks in the test process).
    pytest.param("mlp", marks=pytest.mark.verify_subprocess),
    "convnet", "attention", "unused", "alldtypes"])
def test_verify_passes_on_pjrt_and_iree(artifacts, model: str, request) -> None:
    art = artifacts(model)
    results = verify.run_checks(art)
    by_check = {r.check: r for r in results}
    assert [r.check for r in results] == list(verify.CHECKS)
    for r in results:
        assert r.status == "pass", (r.check, r.detail)
    # IREE is part of the dev set: it must really have run, output by output.
    expected_outputs = {o.name for o in manifest.load(art).outputs}
    for check in ("jaxexport", "pjrt", "iree"):
        assert {c.output for c in by_check[check].comparisons} == expected_outputs
    table = verify.format_table(results)
    assert "iree" in table and "FAIL" not in table
    if request.node.get_closest_marker("verify_subprocess"):
        for r in results:
            assert r.detail.endswith(f"model module '{model}' not importable here"), r


def test_verify_cli_table_and_exit_code(artifacts, capsys) -> None:
    rc, text = _verify(artifacts("mlp"), capsys, "--require-iree")
    assert rc == 0, text
    header = text.splitlines()[0].split()
    assert header[:3] == ["check", "output", "max"] and "tolerance" in header
    assert "jaxport verify: OK" in text


def test_unused_parameter_is_dropped_and_bound_from_manifest(artifacts) -> None:
    m = manifest.load(artifacts("unused"))
    dropped = {(d.kind, d.name, d.key_path) for d in m.dropped_leaves}
    assert dropped == {("parameter", "params.a_unused", "['a_unused']"),
                       ("input", "ignored", "[1]")}
    names = [a.name for a in m.programs[0].arguments]
    assert names == ["params.b", "params.w", "x"]
    assert [a.leaf_index for a in m.programs[0].arguments] == [1, 2, 3]
    assert not (artifacts("unused") / "weights" / "params.a_unused").exists()
    assert [i.name for i in m.inputs] == ["x", "ignored"]  # the caller's view keeps both


def test_multi_platform_has_platform_index_argument(tmp_path: Path, capsys) -> None:
    art = tmp_path / "mp" / "1"
    m = export_model("mlp", art, platforms=("cpu", "cuda", "tpu"), goldens=1)
    assert list(m.platforms) == ["cpu", "cuda", "tpu"]
    first = m.programs[0].arguments[0]
    assert first.role == manifest_pb2.ARGUMENT_ROLE_PLATFORM_INDEX and first.index == 0
    assert first.dtype.mlir == "i32" and list(first.shape) == []
    assert [a.index for a in m.programs[0].arguments] == list(range(6))
    rc, text = _verify(art, capsys, "--require-iree")
    assert rc == 0, text


def test_cuda_only_artifact_is_not_passed_on_a_machine_without_cuda(tmp_path: Path) -> None:
    """Lowering for cuda works here (no GPU needed); verify cannot execute it, so it fails in
    one line naming the listed and the present platforms, instead of passing with every
    execution check skipped. --allow-unexecuted accepts the checksums only."""
    assert verify.present_platforms() == ["cpu"]  # this machine: the premise of the test
    art = tmp_path / "cuda" / "1"
    m = export_model("mlp", art, platforms=("cuda",), goldens=1)
    assert list(m.platforms) == ["cuda"]
    assert m.programs[0].arguments[0].role == manifest_pb2.ARGUMENT_ROLE_PARAMETER
    proc = run_cli(["verify", str(art)], tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert proc.stdout == ""
    assert proc.stderr.strip() == (
        "jaxport verify: error: none of the artifact's platforms (cuda) is available here "
        "(present: cpu), so nothing can execute the program; run verify on a machine with one "
        "of them, or pass --allow-unexecuted to check the checksums only")
    accepted = run_cli(["verify", str(art), "--allow-unexecuted"], tmp_path)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    assert "checksums: pass" in accepted.stdout
    for check in ("jaxexport", "pjrt", "iree"):
        assert f"{check}: skip: none of the artifact's platforms (cuda)" in accepted.stdout


def test_verify_executes_on_the_listed_platform_present(tmp_path: Path) -> None:
    """A cuda+cpu artifact is executed on cpu (the one present), platform index 1 bound from
    the manifest; the worker environment is the caller's (JAX_PLATFORMS is not forced)."""
    art = tmp_path / "cudacpu" / "1"
    m = export_model("mlp", art, platforms=("cuda", "cpu"), goldens=1)
    assert m.programs[0].arguments[0].role == manifest_pb2.ARGUMENT_ROLE_PLATFORM_INDEX
    results = {r.check: r for r in verify.run_checks(art)}
    assert set(results) == set(verify.CHECKS)
    for check in ("jaxexport", "pjrt", "iree"):
        assert results[check].status == "pass", (check, results[check].detail)
    assert ", on cpu" in results["jaxexport"].detail
    assert ", on cpu" in results["pjrt"].detail


def _damaged(artifacts, tmp_path: Path) -> Path:
    copy = tmp_path / "damaged" / "1"
    shutil.copytree(artifacts("mlp"), copy)
    return copy


def test_verify_refuses_flipped_weight_byte(artifacts, tmp_path: Path, capsys) -> None:
    art = _damaged(artifacts, tmp_path)
    chunk = art / "weights" / "params.w1" / "c" / "0" / "0"
    data = bytearray(chunk.read_bytes())
    data[17] ^= 0x01
    chunk.write_bytes(bytes(data))
    rc, text = _verify(art, capsys, "--checks", "checksums,pjrt")
    assert rc == 1
    assert "checksums: fail" in text and "weights/params.w1/c/0/0" in text and "sha256" in text
    assert "FAILED" in text


def test_verify_refuses_truncated_mlirbc(artifacts, tmp_path: Path, capsys) -> None:
    art = _damaged(artifacts, tmp_path)
    bc = art / "model.mlirbc"
    bc.write_bytes(bc.read_bytes()[: bc.stat().st_size // 2])
    rc, text = _verify(art, capsys)
    assert rc == 1
    assert "model.mlirbc" in text and "truncated" in text
    assert "pjrt: fail" in text and "iree: fail" in text


def test_verify_refuses_reordered_manifest(artifacts, tmp_path: Path, capsys) -> None:
    """Swap the b1 and w1 entries and renumber them, as a careless hand edit would."""
    art = _damaged(artifacts, tmp_path)
    raw = json.loads((art / "manifest.json").read_text())
    args = raw["programs"][0]["arguments"]
    args[0], args[2] = args[2], args[0]
    for i, a in enumerate(args):
        a["index"] = i
    (art / "manifest.json").write_text(json.dumps(raw, indent=2))
    rc, text = _verify(art, capsys, "--checks", "jaxexport,pjrt")
    assert rc == 1
    assert "jaxexport: fail" in text and "manifest argument order" in text
    assert "pjrt: fail" in text  # bound purely from the manifest: wrong shapes/results


def test_verify_refuses_edited_index(artifacts, tmp_path: Path, capsys) -> None:
    art = _damaged(artifacts, tmp_path)
    raw = json.loads((art / "manifest.json").read_text())
    raw["programs"][0]["arguments"][1]["index"] = 3
    (art / "manifest.json").write_text(json.dumps(raw))
    rc, text = _verify(art, capsys)
    assert rc == 1
    assert len(text.strip().splitlines()) == 1
    assert "arguments[1]" in text and "index 3" in text and "edited" in text


def test_verify_refuses_unknown_schema_version(artifacts, tmp_path: Path, capsys) -> None:
    art = _damaged(artifacts, tmp_path)
    raw = json.loads((art / "manifest.json").read_text())
    raw["schemaVersion"] = 99
    (art / "manifest.json").write_text(json.dumps(raw))
    rc, text = _verify(art, capsys)
    assert rc == 1 and "99" in text and "1..2" in text


def test_verify_refuses_schema_1_label_on_schema_2_fields(artifacts, tmp_path: Path,
                                                          capsys) -> None:
    """A mesh (or symbolic dimensions) needs schema 2: a manifest labelled 1 that carries one
    is refused naming both versions, so a version-1 reader never sees such an artifact."""
    art = _damaged(artifacts, tmp_path)
    raw = json.loads((art / "manifest.json").read_text())
    assert raw["schemaVersion"] == 1
    raw["mesh"] = {"axes": [{"name": "data", "size": 2}]}
    (art / "manifest.json").write_text(json.dumps(raw))
    rc, text = _verify(art, capsys)
    assert rc == 1 and "schema_version 1" in text and "need schema_version 2" in text
    assert manifest.schema_version_for(manifest_pb2.Manifest()) == 1


_ROUND_TRIP = textwrap.dedent("""
    import json, sys
    import numpy as np, jax, tensorstore as ts
    root = sys.argv[1]
    m = json.load(open(root + "/manifest.json"))
    prog = m["programs"][0]
    if any(a["dtype"]["itemsize"] == 8 for a in prog["arguments"] if "dtype" in a):
        jax.config.update("jax_enable_x64", True)
    exp = jax.export.deserialize(bytearray(open(root + "/" + prog["jaxexportFile"], "rb").read()))
    checked = 0
    for case in m["goldens"]:
        leaves = [np.zeros(a.shape, a.dtype) for a in exp.in_avals]  # dropped leaves: unused
        for a in prog["arguments"]:
            if a["role"] == "ARGUMENT_ROLE_PARAMETER":
                spec = json.loads(a["tensorstoreSpecJson"])
                spec["kvstore"]["path"] = root + "/" + spec["kvstore"]["path"]
                leaves[a["leafIndex"]] = ts.open(spec).result().read().result()
            elif a["role"] == "ARGUMENT_ROLE_INPUT":
                raw = np.load(root + "/" + case["inputs"][a["name"]])
                leaves[a["leafIndex"]] = raw.view(exp.in_avals[a["leafIndex"]].dtype)
        args, kwargs = exp.in_tree.unflatten(leaves)
        outs = jax.tree.leaves(exp.call(*args, **kwargs))
        for r, o in zip(prog["results"], outs, strict=True):
            want = np.load(root + "/" + case["outputs"][r["name"]])
            np.testing.assert_array_equal(np.asarray(o).view(want.dtype) if want.dtype.kind == "V"
                                          else np.asarray(o), want)
            checked += 1
    names = {k.split(".")[0] for k in sys.modules}
    print(json.dumps({"checked": checked, "imported": sorted(names & {sys.argv[2], "jaxport",
                      "orbax", "google"})}))
""")


@pytest.mark.parametrize("model", ["nested", "unused", "alldtypes"])
def test_fresh_isolated_process_runs_artifact_without_the_model(artifacts, model: str) -> None:
    art = artifacts(model)
    proc = subprocess.run([sys.executable, "-I", "-c", _ROUND_TRIP, str(art), model],
                          capture_output=True, text=True, cwd=REPO / "tests" / "models",
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    m = manifest.load(art)
    assert result["checked"] == len(m.goldens) * len(m.outputs) > 0
    # -I keeps even the model's own directory (the cwd) off sys.path.
    assert result["imported"] == []


@pytest.mark.parametrize(
    "spec",
    [
        {"driver": "zarr3", "kvstore": {"driver": "file", "path": "/etc/"}},
        {"driver": "zarr3", "kvstore": {"driver": "file", "path": "weights/../../x/"}},
        {"driver": "zarr3", "kvstore": {"driver": "http", "base_url": "http://example.com/"}},
        {"driver": "n5", "kvstore": {"driver": "file", "path": "weights/params.w1/"}},
    ],
)
def test_manifest_cannot_point_weights_outside_the_artifact(artifacts, tmp_path: Path,
                                                            spec: dict) -> None:
    art = _damaged(artifacts, tmp_path)
    m = manifest.load(art)
    arg = m.programs[0].arguments[2]
    arg.tensorstore_spec_json = json.dumps(spec)
    with pytest.raises(manifest.ArtifactError,
                       match=r"relative path inside the artifact|contains '..'|zarr3 driver"):
        manifest.verify_files(art, m)


def test_real_verify_command_exit_codes(artifacts, tmp_path: Path) -> None:
    art = _damaged(artifacts, tmp_path)
    (art / "goldens" / "case0" / "outputs" / "output.npy").write_bytes(b"not an npy")
    proc = run_cli(["verify", str(art), "--checks", "checksums"], tmp_path)
    assert proc.returncode == 1
    assert "checksums  -" in proc.stdout and "goldens/case0/outputs/output.npy" in proc.stdout
    missing = run_cli(["verify", str(tmp_path / "nope")], tmp_path)
    assert missing.returncode == 1
    assert missing.stderr.strip().splitlines() == [
        f"jaxport verify: error: {tmp_path / 'nope' / 'manifest.json'}: no manifest.json; "
        "is this a jaxport artifact directory?"]
    usage = run_cli(["verify", str(art), "--checks", "pjrt,bogus"], tmp_path)
    assert usage.returncode == 2 and "bogus" in usage.stderr
    assert len(usage.stderr.strip().splitlines()) == 1
