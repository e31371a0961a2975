"""`--labels OUTPUT=FILE` / `export(labels=...)`: class labels copied into the artifact,
checksummed, named by the output's `labels_file` and read back by `Artifact.labels`."""

from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
import jaxport.artifact
import pytest
from exporter_helpers import model_cli_args, model_module, run_cli
from jaxport.artifact import dims, manifest
from jaxport.exporter import api
from jaxport.exporter.errors import ExportError

X = {"x": jax.ShapeDtypeStruct((2, 3), jnp.float32)}  # scored: probs/logits [2, 4], score [2]
FOUR = "cat\ndog\nbird\nfish\n"


def _export(tmp_path: Path, labels: dict, **kwargs):
    mod = model_module("scored")
    return api.export(mod.predict, mod.init(jax.random.key(0)), X, tmp_path / "m" / "1",
                      goldens=1, quiet=True, labels=labels, **kwargs)


def test_cli_labels_are_copied_checksummed_and_read_back(tmp_path: Path) -> None:
    (tmp_path / "classes.txt").write_text(FOUR)
    out = tmp_path / "repo" / "scored" / "1"
    proc = run_cli(model_cli_args("scored", out, "--goldens", "1",
                                  "--labels", f"probs={tmp_path / 'classes.txt'}"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    m = manifest.load(out)
    by_name = {o.name: o for o in m.outputs}
    assert by_name["probs"].labels_file == "labels/probs.txt"
    assert by_name["logits"].labels_file == "" and by_name["score"].labels_file == ""
    entry = next(f for f in m.files if f.path == "labels/probs.txt")
    assert entry.sha256 == manifest.sha256_bytes(FOUR.encode())
    art = jaxport.artifact.open(out)  # checks every file's checksum
    assert art.labels("probs") == ["cat", "dog", "bird", "fish"]
    assert art.labels("logits") is None
    proc = run_cli(["verify", str(out), "--checks", "checksums"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_api_labels_for_two_outputs_bom_dropped(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_bytes(b"\xef\xbb\xbfcat\r\ndog\r\nbird\r\nfish")
    (tmp_path / "b.txt").write_text("\u00e9t\u00e9\nhiver\nprintemps\nautomne\n",
                                    encoding="utf-8")
    m = _export(tmp_path, {"probs": tmp_path / "a.txt", "logits": str(tmp_path / "b.txt")})
    art = jaxport.artifact.open(tmp_path / "m" / "1")
    assert art.labels("probs") == ["cat", "dog", "bird", "fish"]
    assert art.labels("logits")[0] == "\u00e9t\u00e9"
    assert sorted(f.path for f in m.files if f.path.startswith("labels/")) == \
        ["labels/logits.txt", "labels/probs.txt"]


@pytest.mark.parametrize("name, content, needle", [
    ("nope", FOUR, "labels for output 'nope' ({f}): the model has no such output; its outputs "
                   "are logits, probs, score"),
    ("probs", FOUR + "extra\n", "{f} has 5 line(s) but the output has 4 classes (last dimension "
                                "of [2, 4])"),
    ("probs", "cat\n\ndog\n", "{f} has 3 line(s) but the output has 4 classes (last dimension "
                              "of [2, 4]); line i must name class i, one line per class "
                              "(line 2 is empty)"),
    ("probs", b"cat\ndog\n\xff\xfe\nfish\n", "labels of output 'probs': {f} is not UTF-8 text "
                                             "(byte 8, line 3)"),
])
def test_bad_labels_are_refused_naming_the_file(tmp_path: Path, name: str, content, needle: str
                                                ) -> None:
    f = tmp_path / "classes.txt"
    f.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ExportError) as info:
        _export(tmp_path, {name: f})
    assert needle.format(f=f) in str(info.value)
    assert not (tmp_path / "m").exists()  # nothing left behind


def test_unreadable_labels_file(tmp_path: Path) -> None:
    missing = tmp_path / "missing.txt"
    with pytest.raises(ExportError, match=f"labels of output 'probs': cannot read {missing}: "
                                          "No such file or directory"):
        _export(tmp_path, {"probs": missing})
    with pytest.raises(ExportError, match=f"cannot read {tmp_path}: Is a directory"):
        _export(tmp_path, {"probs": tmp_path})


def test_output_without_class_dimension(tmp_path: Path) -> None:
    f = tmp_path / "classes.txt"
    f.write_text("a\n")
    with pytest.raises(ExportError,
                       match=r"output 'score' .* has shape \[-1\] with no class dimension"):
        _export(tmp_path, {"score": f}, batch_sizes=[1, 2])


@pytest.mark.parametrize("flags, code, needle", [
    (["--labels", "probs"], 2, "--labels 'probs': expected OUTPUT=FILE"),
    (["--labels", "probs=a.txt", "--labels", "probs=b.txt"], 2,
     "--labels: output 'probs' given twice (a.txt, b.txt)"),
    (["--labels", "nope=classes.txt"], 1,
     "the model has no such output; its outputs are logits, probs, score"),
])
def test_cli_label_errors_are_one_line(tmp_path: Path, flags: list[str], code: int,
                                       needle: str) -> None:
    (tmp_path / "classes.txt").write_text(FOUR)
    proc = run_cli(model_cli_args("scored", tmp_path / "out", *flags), tmp_path)
    assert proc.returncode == code, proc.stderr
    assert needle in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "out").exists()


def test_labels_take_the_name_after_output_renaming(tmp_path: Path) -> None:
    """README / docs/exporter.md: `--labels` names the output as the artifact does, after
    `--output` renaming; the name before it is refused, listing the names there are."""
    (tmp_path / "classes.txt").write_text(FOUR)
    m = _export(tmp_path, {"p": tmp_path / "classes.txt"}, output_names={"probs": "p"})
    assert {o.name: o.labels_file for o in m.outputs}["p"] == "labels/p.txt"
    with pytest.raises(ExportError, match=r"labels for output 'probs' .*: the model has no such "
                                          r"output; its outputs are logits, p, score"):
        _export(tmp_path, {"probs": tmp_path / "classes.txt"}, output_names={"probs": "p"},
                force=True)


def test_labels_on_an_output_without_known_rows_warn(tmp_path: Path, capsys) -> None:
    """Issue 28 item 2: probs [2, 4] from a fixed [2, 3] input has no known batch axis, so the
    server's top-k ranks all 8 entries together: a warning (one line) names the output and the
    ways to per-row top-k; the export still succeeds."""
    (tmp_path / "classes.txt").write_text(FOUR)
    _export(tmp_path, {"probs": tmp_path / "classes.txt"})
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "jaxport: warning: labels for output 'probs': shape [2, 4] has no known batch axis, so "
        "the server's top-k ranks the whole tensor, mixing rows (an index past 3 gets no "
        "label); for per-row top-k export with --batch-sizes, or a --dim that is dimension 0 "
        "of every input and output"], err


@pytest.mark.parametrize("inputs, kwargs", [
    (X, {"batch_sizes": (2,)}),
    ({"x": (("B", 3), jnp.float32)}, {"dims": {"B": "1..8"}}),
], ids=["batch-sizes", "dim-B"])
def test_labels_on_an_output_with_rows_do_not_warn(tmp_path: Path, capsys, inputs, kwargs
                                                   ) -> None:
    (tmp_path / "classes.txt").write_text(FOUR)
    mod = model_module("scored")
    m = api.export(mod.predict, mod.init(jax.random.key(0)), inputs, tmp_path / "m" / "1",
                   goldens=1, quiet=True, labels={"probs": tmp_path / "classes.txt"}, **kwargs)
    assert capsys.readouterr().err == ""
    assert dims.row_outputs(m) == {"logits", "probs", "score"}
