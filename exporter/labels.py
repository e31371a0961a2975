"""Class labels of classification outputs (`--labels NAME=FILE`, `export(labels={...})`).

A labels file is UTF-8 text with one label per line: line i names class index i along the
output's last dimension (Triton's `label_filename`; the bridge's classification extension
answers `value:index:label` with it). The exporter copies it into the artifact as
`labels/<output>.txt`, lists it in `manifest.files` with its sha256 (every file the manifest
names has one) and sets the output's `TensorSpec.labels_file`. Consumers read it with
`jaxport.artifact.open(dir).labels(output)`.

Refused, each as one line naming the file and the output:
- an output name the function does not return (the known ones are listed);
- a file that cannot be read, or is not UTF-8;
- a scalar output (no class dimension), or a line count other than the output's last
  dimension: too many lines cannot all be classes, too few leave classes unnamed, and either
  way the file is most likely for another model (e.g. 1000 ImageNet labels for a 1001-class
  output whose class 0 is "background"), which would put wrong names on every answer.

Warned (`check_labels` returns the warnings): labels on an output with more than one row and
no known batch axis (`jaxport.artifact.dims.row_outputs`): the bridge's top-k then ranks the
whole tensor, mixing rows, and indices past the last class get no label.

Lines are counted as `str.splitlines()` counts them (the reader's rule); a UTF-8 byte order
mark is dropped.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from jaxport.artifact import dims as dims_mod
from jaxport.artifact.gen import manifest_pb2
from jaxport.artifact.paths import unique_safe_names
from jaxport.exporter.errors import ExportError

__all__ = ["LABELS_DIR", "Labels", "check_labels", "read_labels", "write_labels"]

LABELS_DIR = "labels"
_BOM = "\ufeff"


@dataclass(frozen=True)
class Labels:
    """One output's labels file as read (before the output is known to exist)."""

    output: str
    source: Path
    text: str

    @property
    def lines(self) -> list[str]:
        return self.text.splitlines()


def read_labels(labels: Mapping[str, str | os.PathLike[str]] | None) -> list[Labels]:
    """Read every labels file up front, so an unreadable one fails before tracing."""
    out: list[Labels] = []
    for output, path in (labels or {}).items():
        if not isinstance(output, str) or not output:
            raise ExportError(f"labels: output names must be non-empty strings, got {output!r}")
        source = Path(path)
        try:
            data = source.read_bytes()
        except OSError as exc:
            raise ExportError(f"labels of output {output!r}: cannot read {source}: "
                              f"{exc.strerror or exc}") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = data[:exc.start].count(b"\n") + 1
            raise ExportError(f"labels of output {output!r}: {source} is not UTF-8 text (byte "
                              f"{exc.start}, line {line}); save it as UTF-8, one label per "
                              "line") from None
        out.append(Labels(output, source, text.removeprefix(_BOM)))
    return out


def check_labels(manifest: manifest_pb2.Manifest, labels: list[Labels]) -> list[str]:
    """Each file against its output (known name, a class dimension, one line per class); the
    warnings for outputs whose top-k would mix rows (module doc)."""
    specs = {o.name: o for o in manifest.outputs}
    rows = dims_mod.row_outputs(manifest)
    warnings = []
    for item in labels:
        spec = specs.get(item.output)
        if spec is None:
            raise ExportError(f"labels for output {item.output!r} ({item.source}): the model has "
                              f"no such output; its outputs are {', '.join(specs)}")
        if not spec.shape or spec.shape[-1] < 0:
            raise ExportError(f"labels for output {item.output!r} ({item.source}): the output "
                              f"has shape {list(spec.shape)} with no class dimension (labels "
                              "name the indices of the last dimension)")
        lines, classes = item.lines, spec.shape[-1]
        if len(lines) != classes:
            empty = next((i + 1 for i, s in enumerate(lines) if not s.strip()), None)
            raise ExportError(
                f"labels for output {item.output!r}: {item.source} has {len(lines)} line(s) "
                f"but the output has {classes} classes (last dimension of {list(spec.shape)}); "
                "line i must name class i, one line per class"
                + (f" (line {empty} is empty)" if empty else ""))
        if item.output not in rows and any(d != 1 for d in spec.shape[:-1]):
            warnings.append(
                f"labels for output {item.output!r}: shape {list(spec.shape)} has no known "
                "batch axis, so the server's top-k ranks the whole tensor, mixing rows (an index "
                f"past {classes - 1} gets no label); for per-row top-k export with --batch-sizes, "
                "or a --dim that is dimension 0 of every input and output")
    return warnings


def write_labels(root: Path, manifest: manifest_pb2.Manifest, labels: list[Labels]) -> None:
    """Write each (checked) file to `root/labels/` and point its output's `labels_file` at it;
    `manifest.files` lists it with the artifact's other files."""
    if not labels:
        return
    specs = {o.name: o for o in manifest.outputs}
    stems = unique_safe_names([item.output for item in labels])
    (root / LABELS_DIR).mkdir()
    for item, stem in zip(labels, stems, strict=True):
        rel = f"{LABELS_DIR}/{stem}.txt"
        (root / rel).write_text(item.text, encoding="utf-8", newline="")
        specs[item.output].labels_file = rel
