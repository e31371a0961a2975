"""jaxport.artifact: the artifact format, shared by the exporter (writes), `verify` and the
bridge (read), and the public API for Python consumers.

One module per concept: `manifest` (schema I/O, validation, checksums), `weights` (zarr3 arrays
via TensorStore), `goldens` (.npy cases), `paths` (the one rule for paths inside an artifact or
repository), `checks` (the checkify table, output layout and failure text), `errors`, `location`
(local paths and URLs), `dims` (the admissible sizes of symbolic dimensions), `index` (what a
URL repository holds), `binding` (the one argument binder: manifest arguments to `@main` slots
or pytree leaves, for the reader, the bridge and `verify`), `batching` (the batch-size rule:
which program runs N rows, padded how) and `reader` (`open`, `Artifact`).
An artifact older than jax's compatibility window warns with `CompatibilityWarning`.
Importing this package never imports jax; only deserializing or calling a program does. It
imports neither `jaxport.exporter` nor `jaxport.bridge`.

    import jaxport.artifact
    art = jaxport.artifact.open("repo/mlp/1")
    outputs = art.call(x=x)

The format itself, every manifest field and its changelog: docs/artifact-format.md.
"""

from __future__ import annotations

from jaxport.artifact.dims import DimensionError
from jaxport.artifact.errors import (
    ArtifactError,
    CheckFailedError,
    ChecksumError,
    SchemaVersionError,
)
from jaxport.artifact.manifest import CompatibilityWarning
from jaxport.artifact.reader import Artifact, Golden, open

__all__ = [
    "Artifact",
    "ArtifactError",
    "CheckFailedError",
    "ChecksumError",
    "CompatibilityWarning",
    "DimensionError",
    "Golden",
    "SchemaVersionError",
    "open",
]
