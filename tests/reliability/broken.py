"""A model repository that mixes good models with every way an artifact can be bad.

Good: `fuzzy`, `slow`. Broken (must fail to load, alone): `corrupt_weights` (one byte of a
weight chunk flipped), `tampered_manifest` (an input shape changed consistently everywhere in
manifest.json, so only checking it against the program catches it), `missing_file`
(model.jaxexport deleted). REFUSAL_WORD says what
each refusal must mention.
Escaping (must be refused): `escape_model` (the model directory is a
symlink to a valid artifact outside the repository), `escape_version` (a real model directory
whose version `1` is such a symlink), `escape_program_path` (manifest names its program file
as `../../fuzzy/1/model.jaxexport`), `escape_weights_path` (a weight's TensorStore spec points
at an absolute path outside), and `outside` — a valid model directory NEXT TO the
repository, which a load request for `../outside` would reach if names were joined blindly.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

GOOD = ("fuzzy", "slow")
BROKEN = {
    "corrupt_weights": "weights",
    "tampered_manifest": "manifest",
    "missing_file": "model.jaxexport",
}
# A word the refusal of each broken model must contain (what is wrong, or which file).
REFUSAL_WORD = {
    "corrupt_weights": "sha256",
    "tampered_manifest": "shape",
    "missing_file": "model.jaxexport",
}
ESCAPING = ("escape_model", "escape_version", "escape_program_path", "escape_weights_path")


@dataclass(frozen=True)
class HostileRepo:
    root: Path
    outside: Path  # a valid model directory beside the repository


def _flip_a_weight_byte(artifact: Path) -> Path:
    chunks = sorted(p for p in (artifact / "weights").rglob("*") if p.is_file()
                    and p.name != "zarr.json")
    victim = chunks[0]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    return victim


def _tamper_manifest(artifact: Path) -> None:
    path = artifact / "manifest.json"
    doc = json.loads(path.read_text())
    args = doc["programs"][0]["arguments"]
    inp = next(a for a in args if a["role"] == "ARGUMENT_ROLE_INPUT")
    # A consistent lie (shape and byte size agree): only comparing the manifest with the
    # program itself can catch it.
    shape = [int(d) + 1 for d in inp["shape"]] or [2]
    inp["shape"] = [str(d) for d in shape]
    inp["byteSize"] = str(math.prod(shape) * int(inp["dtype"]["itemsize"]))
    for spec in doc["inputs"]:
        if spec["name"] == inp["name"]:
            spec["shape"] = inp["shape"]
    path.write_text(json.dumps(doc, indent=2))


def _edit_manifest(artifact: Path, edit) -> None:
    path = artifact / "manifest.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc, indent=2))


def build_hostile_repository(base: Path, artifacts: dict[str, Path]) -> HostileRepo:
    root = base / "repo"
    for name in GOOD:
        shutil.copytree(artifacts[name], root / name / "1")
    for name, what in BROKEN.items():
        art = root / name / "1"
        shutil.copytree(artifacts["fuzzy"], art)
        if what == "weights":
            _flip_a_weight_byte(art)
        elif what == "manifest":
            _tamper_manifest(art)
        else:
            (art / what).unlink()
    elsewhere = base / "elsewhere"
    shutil.copytree(artifacts["fuzzy"], elsewhere / "stolen" / "1")
    (root / "escape_model").symlink_to(elsewhere / "stolen", target_is_directory=True)
    (root / "escape_version").mkdir()
    (root / "escape_version" / "1").symlink_to(elsewhere / "stolen" / "1",
                                               target_is_directory=True)
    art = root / "escape_program_path" / "1"
    shutil.copytree(artifacts["fuzzy"], art)
    _edit_manifest(art, lambda doc: doc["programs"][0].update(
        jaxexportFile="../../fuzzy/1/model.jaxexport"))
    art = root / "escape_weights_path" / "1"
    shutil.copytree(artifacts["fuzzy"], art)
    stolen_w = elsewhere / "stolen" / "1" / "weights"

    def point_weights_outside(doc: dict) -> None:
        arg = next(a for a in doc["programs"][0]["arguments"]
                   if a["role"] == "ARGUMENT_ROLE_PARAMETER")
        spec = json.loads(arg["tensorstoreSpecJson"])
        leaf = spec["kvstore"]["path"].split("weights/", 1)[1]
        spec["kvstore"]["path"] = str(stolen_w / leaf)
        arg["tensorstoreSpecJson"] = json.dumps(spec)

    _edit_manifest(art, point_weights_outside)
    outside = base / "outside"
    shutil.copytree(artifacts["fuzzy"], outside / "1")
    return HostileRepo(root=root, outside=outside)
