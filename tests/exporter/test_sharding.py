"""Sharded export (issue 16): `jaxport export --mesh data=2,model=2 --shard ...` writes an
`Exported` for 4 devices whose manifest records the mesh and every argument's and result's
sharding; split weights are chunked per shard (one shard's chunk is read alone through
TensorStore); `jaxport verify` runs jax.export and PJRT (4 partitions) on 4 devices against
goldens of the UNSHARDED function and states that IREE does not run; `jaxport.artifact.open`
calls it in a fresh process and says in one line what a 1-device process lacks.

pytest's own process keeps its single CPU device: everything that needs 4 devices runs in a
subprocess (the CLI, verify's workers, one `python -I` consumer). The export is done once.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import jax
import numpy as np
import pytest
import tensorstore as ts
from exporter_helpers import model_cli_args, model_module, run_cli
from jaxport import artifact
from jaxport.artifact import manifest as manifest_mod
from jaxport.artifact import sharding as sharding_io
from jaxport.artifact.errors import ArtifactError
from jaxport.artifact.gen import manifest_pb2
from jaxport.exporter import api
from jaxport.exporter.errors import ExportError

# tests/models/mlp.py: x [4, 16] @ w1 [16, 32] + b1 [32] -> tanh -> @ w2 [32, 10] + b2 [10].
SHARDS = ["--mesh", "data=2,model=2", "--shard", "x=data,None", "--shard",
          "params.w1=None,model", "--shard", "params.b*=model", "--shard", "params.w2=model",
          "--shard", "output=data"]
# What each argument / result must be laid out as (the glob params.b* matched b1 and b2).
SPECS = {"params.w1": ["", "model"], "params.b1": ["model"], "params.w2": ["model", ""],
         "params.b2": ["model"], "x": ["data", ""], "output": ["data", ""]}


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/models/mlp.py exported by the real CLI over a 2x2 mesh, once."""
    root = tmp_path_factory.mktemp("sharded")
    out = root / "mlp" / "1"
    proc = run_cli(model_cli_args("mlp", out, *SHARDS), cwd=root)
    assert proc.returncode == 0, proc.stderr
    return out


def test_manifest_records_mesh_and_every_sharding(sharded: Path) -> None:
    m = manifest_mod.load(sharded)
    assert m.schema_version == 2
    assert m.nr_devices == 4
    assert [(a.name, a.size) for a in m.mesh.axes] == [("data", 2), ("model", 2)]
    (program,) = m.programs
    laid_out = {a.name: list(a.sharding.spec) for a in program.arguments}
    laid_out.update({r.name: list(r.sharding.spec) for r in program.results})
    assert laid_out == SPECS
    hlo = {a.name: a.sharding.hlo_sharding for a in [*program.arguments, *program.results]}
    assert hlo["params.w1"].startswith("{devices=[1,2,2]")  # split on dim 1, replicated on data
    assert hlo["x"].startswith("{devices=[2,1,2]")
    # jax's own record in the .jaxexport agrees (deserialising needs no devices).
    exp = artifact.open(sharded).exported()
    assert exp.nr_devices == 4
    assert "sdy.mesh @mesh = <[\"data\"=2, \"model\"=2]>" in exp.mlir_module()


def test_a_shards_chunk_is_read_alone_through_tensorstore(sharded: Path, tmp_path: Path) -> None:
    """params.w1 [16, 32] split over model (2) on dim 1: its zarr3 chunks are the shards
    [16, 16]; with the OTHER shard's chunk file deleted, the second shard's region still reads
    through TensorStore and equals the parameter's columns 16:32."""
    meta = json.loads((sharded / "weights" / "params.w1" / "zarr.json").read_text())
    assert meta["chunk_grid"]["configuration"]["chunk_shape"] == [16, 16]
    copy = tmp_path / "w1"
    shutil.copytree(sharded / "weights" / "params.w1", copy)
    (copy / "c" / "0" / "0").unlink()  # device (model=0)'s shard is gone
    assert (copy / "c" / "0" / "1").stat().st_size == 16 * 16 * 4  # one shard, uncompressed
    store = ts.open({"driver": "zarr3", "kvstore": {"driver": "file", "path": str(copy)}},
                    open=True).result()
    assert list(store.chunk_layout.read_chunk.shape) == [16, 16]
    w1 = np.asarray(model_module("mlp").init(jax.random.key(0))["w1"])
    np.testing.assert_array_equal(store[:, 16:32].read().result(), w1[:, 16:32])
    # The missing chunk reads as the fill value: the shard above came from its own file alone.
    assert not store[:, 0:16].read().result().any()
    # Replicated b2 keeps one chunk; split b1 [32] has one per model shard.
    assert sorted(p.name for p in (sharded / "weights" / "params.b1" / "c").iterdir()) == \
        ["0", "1"]


def test_verify_runs_jax_export_and_pjrt_on_4_devices_and_states_iree(sharded: Path,
                                                                       tmp_path: Path) -> None:
    proc = run_cli(["verify", str(sharded)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert any(ln.split()[:2] == ["jaxexport", "output"] and ln.endswith("PASS")
               for ln in lines), proc.stdout
    assert any(ln.split()[:2] == ["pjrt", "output"] and ln.endswith("PASS") for ln in lines)
    assert "jaxexport: pass: 2 golden case(s), on 4 cpu devices (mesh data=2,model=2)" \
        in proc.stdout
    assert "pjrt: pass: 2 golden case(s), on 4 cpu devices (mesh data=2,model=2)" in proc.stdout
    assert "iree: skip: not run: the program is sharded over 4 devices (mesh data=2,model=2) " \
           "and IREE runs single-device programs" in proc.stdout

    # Those checks compare: a golden output off by 1e-3 fails both sharded executions.
    bad = tmp_path / "bad"
    shutil.copytree(sharded, bad)
    path = bad / "goldens" / "case0" / "outputs" / "output.npy"
    np.save(path, np.load(path) + np.float32(1e-3))
    proc = run_cli(["verify", str(bad), "--checks", "jaxexport,pjrt"], cwd=tmp_path)
    assert proc.returncode == 1
    assert "jaxport verify: FAILED: jaxexport, pjrt" in proc.stdout, proc.stdout

    # A manifest whose (valid) layout disagrees with the program's is caught by jaxexport.
    edited = tmp_path / "edited"
    shutil.copytree(sharded, edited)
    m = manifest_mod.load(edited)
    (result,) = m.programs[0].results
    result.sharding.spec[:] = ["", ""]
    manifest_mod.write(m, edited)
    proc = run_cli(["verify", str(edited), "--checks", "jaxexport"], cwd=tmp_path)
    assert proc.returncode == 1
    assert "jaxexport: fail: ArtifactError: manifest result 0 (output) sharding ['', ''] != " \
           "the program's ['data', '']: the manifest was edited or is stale" in proc.stdout


_CONSUMER = textwrap.dedent("""
    import json, sys
    import jax, numpy as np
    import jaxport.artifact

    art = jaxport.artifact.open(sys.argv[1])
    x = np.load(sys.argv[2])
    out = art.call(x=x)["output"]      # no flag: the process gets its 4 cpu devices
    np.save(sys.argv[3], out)
    print(json.dumps({"devices": len(jax.devices())}))
""")


def test_artifact_call_in_a_fresh_process_and_one_line_without_devices(
        sharded: Path, tmp_path: Path) -> None:
    """`jaxport.artifact.open(dir).call` in a fresh `python -I` process (model not importable)
    raises the CPU device count itself and equals the unsharded original function; in this
    1-device process, whose jax backend is running, it says in one line how to get 4."""
    mlp = model_module("mlp")
    x = np.random.default_rng(5).standard_normal((4, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    proc = subprocess.run([sys.executable, "-I", "-c", _CONSUMER, str(sharded),
                           str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                          capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {"devices": 4}
    want = np.asarray(jax.jit(mlp.predict)(mlp.init(jax.random.key(0)), x))
    # float32: the model axis splits the contraction of h @ w2, whose partial sums are added
    # across devices in another order than one device's dot; measured max difference 4.8e-7
    # on outputs of magnitude ~1-3.
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-5, atol=1e-6)

    assert len(jax.devices()) == 1  # pytest's process: backend started with one device
    with pytest.raises(sharding_io.DeviceCountError) as err:
        artifact.open(sharded).call(x=x)
    message = str(err.value)
    assert "\n" not in message
    assert "mlp (sharded over mesh data=2,model=2) needs 4 devices" in message
    assert "XLA_FLAGS=--xla_force_host_platform_device_count=4" in message
    assert len(jax.devices()) == 1


# ---------------------------------------------------------------------------------------------
# errors: one line naming the thing


def _api_export(tmp_path: Path, mesh, shardings) -> None:
    mlp = model_module("mlp")
    api.export(mlp.predict, mlp.init(jax.random.key(0)),
               {"x": jax.ShapeDtypeStruct((4, 16), np.float32)}, tmp_path / "out", quiet=True,
               goldens=0, mesh=mesh, shardings=shardings)


def test_unknown_mesh_axis_is_one_line_naming_it(tmp_path: Path) -> None:
    proc = run_cli(model_cli_args("mlp", tmp_path / "out", "--mesh", "data=2", "--shard",
                                  "x=batch,None"), cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "jaxport export: error: --shard x=batch,None: mesh axis 'batch' is not in the mesh "
        "(--mesh axes: data)"]
    assert not (tmp_path / "out").exists()


def test_dimension_not_divisible_is_one_line_naming_it(tmp_path: Path) -> None:
    # A parameter, through the API (checked before any device is needed): b2 [10] over 4.
    assert len(jax.devices()) == 1
    with pytest.raises(ExportError) as err:
        _api_export(tmp_path, {"data": 2, "model": 2}, {"params.b2": "data+model"})
    assert str(err.value) == (
        "--shard params.b2: dimension 0 of parameter 'params.b2' is 10 (shape [10]), not "
        "divisible by mesh axis data+model (4 devices)")
    # An input at one of its batch sizes, through the CLI: x [3, 16] over data (2).
    proc = run_cli(["export", "mlp:predict", "--params", "mlp:init", "--input",
                    "x:float32[B,16]", "--batch-sizes", "2,3", "--out", str(tmp_path / "b"),
                    "--quiet", "--mesh", "data=2", "--shard", "x=data"], cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "jaxport export: error: --shard x: dimension 0 of input 'x' is 3 (shape [3, 16] at "
        "batch size 3), not divisible by mesh axis data (2 devices)"]


def test_more_devices_than_the_process_can_provide_is_one_line(tmp_path: Path) -> None:
    """This process's jax backend runs with 1 CPU device: no more can be added, so the API
    says how (the CLI arranges the count itself before jax starts)."""
    assert len(jax.devices()) == 1
    with pytest.raises(ExportError) as err:
        _api_export(tmp_path, {"data": 2}, {"x": "data"})
    assert str(err.value) == (
        "--mesh data=2 needs 2 devices; this process has 1 cpu device(s) and jax has already "
        "initialised its backend, so no more can be added: run jaxport export (it sets the "
        "count itself) or set XLA_FLAGS=--xla_force_host_platform_device_count=2 before jax "
        "starts")
    assert len(jax.devices()) == 1
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("flags", "message"), [
    (["--mesh", "data"], "--mesh 'data': expected NAME=SIZE[,NAME=SIZE...], e.g. --mesh "
                         "data=2,model=2"),
    (["--mesh", "data=2", "--shard", "x"], "--shard 'x': expected KEY=SPEC, e.g. --shard "
                                           "x=data,None or --shard 'params.w1=None,model'"),
])
def test_malformed_mesh_and_shard_flags_exit_2(tmp_path: Path, flags: list[str],
                                               message: str) -> None:
    proc = run_cli(model_cli_args("mlp", tmp_path / "out", *flags), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"jaxport export: error: {message}"]


def test_shard_without_mesh_and_a_key_naming_nothing(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match=r"^shardings \(--shard\) without a mesh"):
        _api_export(tmp_path, None, {"x": "data"})
    proc = run_cli(model_cli_args("mlp", tmp_path / "out", "--mesh", "data=2", "--shard",
                                  "params.w9=data"), cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "jaxport export: error: --shard params.w9: no input, output or parameter is named "
        "'params.w9' (inputs: x; outputs: output; parameters: params.b1, params.b2, "
        "params.w1, params.w2)"]


def test_manifest_validation_refuses_inconsistent_sharding(sharded: Path) -> None:
    text = (sharded / "manifest.json").read_text()
    m = manifest_mod.parse(text)
    m.nr_devices = 2
    with pytest.raises(ArtifactError, match=r"mesh .* is 4 devices but nr_devices is 2"):
        manifest_mod.validate(m)
    m = manifest_mod.parse(text)
    m.programs[0].arguments[0].sharding.spec[0] = "rows"
    with pytest.raises(ArtifactError, match="mesh axis 'rows' is unknown"):
        manifest_mod.validate(m)
    m = manifest_mod.parse(text)
    m.ClearField("mesh")
    m.schema_version = 2
    with pytest.raises(ArtifactError, match="nr_devices 4 without a mesh"):
        manifest_mod.validate(m)


def test_checked_program_sharded_reproduces_check_outputs_bit_for_bit(tmp_path: Path) -> None:
    """checkify checks (extra results, replicated) in a program sharded over data=2: verify's
    jax.export and PJRT runs on 2 devices reproduce every golden's check outputs exactly,
    the tripping cases the exporter searched for included."""
    out = tmp_path / "checked" / "1"
    proc = run_cli(["export", "checked:predict", "--params", "checked:init", "--input",
                    "x:float32[4]", "--input", "idx:int32[3]", "--input", "scale:float32[]",
                    "--checks", "user,index,nan,div", "--out", str(out), "--quiet", "--mesh",
                    "data=2", "--shard", "x=data"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    m = manifest_mod.load(out)
    checks = [r for r in m.programs[0].results if r.role == manifest_pb2.RESULT_ROLE_CHECK]
    assert checks and all(set(r.sharding.spec) <= {""} for r in checks)
    assert sorted(m.checks.golden_kinds) == ["div", "index", "nan", "user"]
    proc = run_cli(["verify", str(out), "--checks", "jaxexport,pjrt"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [ln.split() for ln in proc.stdout.splitlines()]
    assert ["jaxexport", "check", "outputs", "0", "0", "exact", "PASS"] in rows
    assert ["pjrt", "check", "outputs", "0", "0", "exact", "PASS"] in rows
    assert "on 2 cpu devices (mesh data=2)" in proc.stdout
