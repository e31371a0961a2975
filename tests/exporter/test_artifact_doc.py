"""docs/artifact-format.md must match the code: every field it names exists in manifest.proto
and in a real manifest.json, and every proto field is documented."""

from __future__ import annotations

import json
import re

from exporter_helpers import REPO
from jaxport.artifact import manifest
from jaxport.artifact.gen import manifest_pb2

DOC = REPO / "docs" / "artifact-format.md"
# Message fields that a plain (unchecked, unbatched) export leaves out, as the doc says.
OPTIONAL_MESSAGES = {"Checks", "CheckLeaf", "ErrorCode", "Batching", "Dimension", "Padding",
                     "Mesh", "MeshAxis", "Sharding", "DroppedState"}
OPTIONAL_FIELDS = {
    ("Manifest", "checks"),
    ("Manifest", "batching"),
    ("Result", "check"),
    ("TensorSpec", "labelsFile"),
    ("Manifest", "mesh"),
    ("Argument", "sharding"),
    ("Result", "sharding"),
}


def _documented() -> dict[str, list[str]]:
    fields: dict[str, list[str]] = {}
    current = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"^### `(\w+)`", line)
        if heading:
            current = heading.group(1)
            fields[current] = []
            continue
        row = re.match(r"^\| `(\w+)` \|", line)
        if current and row:
            fields[current].append(row.group(1))
        elif line.startswith("## "):
            current = None
    return fields


def _json_objects(value: object, message: str, out: dict[str, set[str]]) -> None:
    """Collect the JSON keys seen for each message type in a real manifest."""
    desc = manifest_pb2.DESCRIPTOR.message_types_by_name[message]
    assert isinstance(value, dict)
    out.setdefault(message, set()).update(value)
    for field in desc.fields:
        if field.message_type is None or field.json_name not in value:
            continue
        if field.message_type.GetOptions().map_entry:
            continue
        sub = value[field.json_name]
        for item in sub if isinstance(sub, list) else [sub]:
            _json_objects(item, field.message_type.name, out)


def test_every_documented_field_exists_in_proto_and_every_proto_field_is_documented() -> None:
    documented = _documented()
    messages = manifest_pb2.DESCRIPTOR.message_types_by_name
    assert set(documented) == set(messages)
    for name, fields in documented.items():
        proto_fields = [f.json_name for f in messages[name].fields]
        assert fields, name
        for f in fields:
            assert f in proto_fields, f"docs name {name}.{f}, which manifest.proto lacks"
        assert sorted(fields) == sorted(proto_fields), f"{name}: undocumented fields"


def test_every_documented_field_appears_in_a_real_manifest(artifacts) -> None:
    seen: dict[str, set[str]] = {}
    for model in ("unused", "mlp"):
        raw = json.loads((artifacts(model) / manifest.MANIFEST_FILE).read_text())
        _json_objects(raw, "Manifest", seen)
    for name, fields in _documented().items():
        if name in OPTIONAL_MESSAGES:
            continue
        for f in fields:
            if (name, f) in OPTIONAL_FIELDS:
                continue
            assert f in seen.get(name, set()), f"{name}.{f} documented but not in manifest.json"


def test_doc_names_the_files_and_commands_the_code_uses(artifacts) -> None:
    text = DOC.read_text(encoding="utf-8")
    art = artifacts("mlp")
    for top in sorted({p.relative_to(art).parts[0] for p in art.iterdir()}):
        assert f"`{top}" in text, top
    for flag in ("--iree-input-type=stablehlo", "--iree-hal-target-device=local",
                 "--iree-hal-local-target-device-backends=llvm-cpu", "--device=local-task",
                 "--function=main", "--iree-input-demote-f64-to-f32=false"):
        assert flag in text
    assert "6 months" in text and "3 weeks" in text and "authenticity" in text


def test_doc_tolerances_match_verify() -> None:
    from jaxport.exporter.verify import TOLERANCES

    text = DOC.read_text(encoding="utf-8")
    for dtype, (atol, rtol) in TOLERANCES.items():
        m = re.search(rf"{dtype}\s+([0-9.e-]+) \+ ([0-9.e-]+)", text)
        assert m, dtype
        assert (float(m.group(1)), float(m.group(2))) == (atol, rtol), dtype


def test_error_code_rows_describe_the_template_as_implemented() -> None:
    """`ErrorCode` rows say what checks.format_failure does: `str.format` over payload LEAVES."""
    rows: dict[str, str] = {}
    current = None
    for line in DOC.read_text(encoding="utf-8").splitlines():
        heading = re.match(r"^### `(\w+)`", line)
        if heading:
            current = heading.group(1)
        row = re.match(r"^\| `(\w+)` \| [^|]+ \| (.*) \|$", line)
        if current == "ErrorCode" and row:
            rows[row.group(1)] = row.group(2)
    template, size = rows["messageTemplate"], rows["payloadSize"]
    for needle in ("str.format", "payload leaf N", "`{N}`", "`{N[i]}`", "`{{`"):
        assert needle in template, needle
    assert "payload leaves" in size
    assert not any("payload element" in text for text in rows.values())
