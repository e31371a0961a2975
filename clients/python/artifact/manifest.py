"""Read, write and validate `manifest.json`, the flat-order contract of an artifact.

The schema is the protobuf message `jaxport.v1.Manifest` (proto/jaxport/v1/manifest.proto);
the file is its canonical proto3 JSON. This module never imports jax, so consumers (the bridge,
`verify` workers, `jaxport.artifact.open`) can check an artifact before deserializing anything.

Trust boundary: the checks here establish INTEGRITY (the bytes are the ones the exporter wrote),
not authenticity. Only deserialize artifacts from a source you trust.
"""

from __future__ import annotations

import datetime
import hashlib
import importlib.metadata
import json
import math
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from google.protobuf import json_format
from jaxport.artifact.errors import ArtifactError, ChecksumError, SchemaVersionError
from jaxport.artifact.gen import manifest_pb2
from jaxport.artifact.location import LocalLocation, Location, locate
from jaxport.artifact.paths import check_relative, resolve_inside
from jaxport.protocol import dtypes

__all__ = [
    "BACKWARD_COMPATIBILITY_DAYS",
    "EXPORTED_AT_FORMAT",
    "MANIFEST_FILE",
    "MAX_SUPPORTED_SCHEMA_VERSION",
    "MIN_SUPPORTED_SCHEMA_VERSION",
    "SCHEMA_VERSION",
    "CompatibilityWarning",
    "check_paths",
    "compatibility_warnings",
    "dtype_message",
    "exported_at",
    "load",
    "numpy_dtype",
    "parse",
    "schema_version_for",
    "sha256_bytes",
    "sha256_file",
    "to_json",
    "validate",
    "verify_files",
    "write",
]

# Schema version written by this exporter for an artifact that uses no schema-2 feature, and the
# range readers accept. Changelog (keep in sync with proto/jaxport/v1/manifest.proto):
# - 1 (2026-11-29): first release.
# - 2 (2026-12-01): symbolic dimensions and sharded multi-device programs. Written only by
#   artifacts that use them (`schema_version_for`): a version-1 reader refuses those (it would
#   misread a -1 axis or place a sharded program on one device) and still reads every other.
SCHEMA_VERSION = 1
MIN_SUPPORTED_SCHEMA_VERSION = 1
MAX_SUPPORTED_SCHEMA_VERSION = 2

MANIFEST_FILE = "manifest.json"

# jax's promise for serialized `jax.export` artifacts (jax documentation, "Exporting and
# serializing staged-out computations", section "Compatibility guarantees"): an artifact runs
# with jax versions released up to 6 months after the exporting one (backward compatibility),
# and with versions up to 3 weeks older (forward compatibility).
BACKWARD_COMPATIBILITY_DAYS = 183
EXPORTED_AT_FORMAT = "%Y-%m-%dT%H:%M:%SZ"


class CompatibilityWarning(UserWarning):
    """An artifact outside jax's compatibility window (too old, or newer than this jax)."""

_ROLE = manifest_pb2.ArgumentRole
_RROLE = manifest_pb2.ResultRole


def dtype_message(dtype: np.dtype | type | str) -> manifest_pb2.DType:
    """The manifest DType for a numpy dtype, from the one dtype table."""
    row = dtypes.by_numpy(dtype)
    return manifest_pb2.DType(
        numpy=row.numpy_name, mlir=row.mlir, datatype=row.datatype, itemsize=row.itemsize
    )


def numpy_dtype(dtype: manifest_pb2.DType) -> np.dtype:
    """The little-endian numpy dtype a manifest DType names (its vocabularies must agree)."""
    try:
        row = dtypes.by_numpy(dtype.numpy)
    except dtypes.UnsupportedDtypeError as exc:
        raise ArtifactError(f"manifest names an unsupported dtype: {exc}") from None
    if (row.mlir, row.datatype, row.itemsize) != (dtype.mlir, dtype.datatype, dtype.itemsize):
        raise ArtifactError(
            f"manifest dtype {dtype.numpy!r} is inconsistent: mlir={dtype.mlir!r} "
            f"datatype={dtype.datatype!r} itemsize={dtype.itemsize} (expected {row.mlir!r}, "
            f"{row.datatype!r}, {row.itemsize})"
        )
    return row.numpy


def sha256_bytes(data: bytes | bytearray | memoryview) -> str:
    """Lowercase hex sha256 of some bytes."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Lowercase hex sha256 of a file's bytes, streamed."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def to_json(manifest: manifest_pb2.Manifest) -> str:
    """Canonical proto3 JSON, with zero values printed (`index: 0` must be explicit)."""
    return (
        json_format.MessageToJson(
            manifest, always_print_fields_with_no_presence=True, indent=2, sort_keys=False
        )
        + "\n"
    )


def write(manifest: manifest_pb2.Manifest, artifact_dir: str | os.PathLike[str]) -> Path:
    """Validate and write `manifest.json` into `artifact_dir`; returns its path."""
    validate(manifest)
    path = Path(artifact_dir) / MANIFEST_FILE
    path.write_text(to_json(manifest), encoding="utf-8")
    return path


def parse(text: str, source: str = MANIFEST_FILE) -> manifest_pb2.Manifest:
    """Parse and validate manifest JSON text; `source` names it in errors."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{source} is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ArtifactError(f"{source} must hold a JSON object")
    _check_schema_version(raw.get("schemaVersion", raw.get("schema_version", 0)), source)
    try:
        manifest = json_format.ParseDict(raw, manifest_pb2.Manifest())
    except json_format.ParseError as exc:
        raise ArtifactError(
            f"{source} does not match the jaxport.v1.Manifest schema: {exc}"
        ) from None
    validate(manifest, source)
    return manifest


def load(artifact_dir: str | os.PathLike[str] | Location) -> manifest_pb2.Manifest:
    """Read and validate `<artifact_dir>/manifest.json` (schema version and structure).
    `artifact_dir`: a local directory, or a Location (`location.locate`) of one by URL."""
    root = locate(artifact_dir)
    source = root.display(MANIFEST_FILE)
    if isinstance(root, LocalLocation):
        path = root.path / MANIFEST_FILE
        try:
            if path.is_symlink():
                resolve_inside(root.path, MANIFEST_FILE, str(path))
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise ArtifactError(
                f"{path}: no manifest.json; is this a jaxport artifact directory?"
            ) from None
        except OSError as exc:
            raise ArtifactError(f"{path}: cannot read: {exc.strerror}") from None
        except UnicodeDecodeError as exc:
            raise ArtifactError(f"{path} is not UTF-8 text: {exc}") from None
        return parse(text, source)
    data = root.read_bytes(MANIFEST_FILE)
    if data is None:
        raise ArtifactError(f"{source}: no manifest.json; is this a jaxport artifact directory?")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ArtifactError(f"{source} is not UTF-8 text: {exc}") from None
    return parse(text, source)


def schema_version_for(manifest: manifest_pb2.Manifest) -> int:
    """The lowest schema version that can describe `manifest`: 2 when it has symbolic
    dimensions or a device mesh, else 1. The exporter writes this; `validate` refuses a manifest
    labelled lower than what its fields need."""
    if manifest.dimensions or manifest.padding or manifest.HasField("mesh"):
        return 2
    return 1


def _check_schema_version(version: object, source: str) -> None:
    if not isinstance(version, int) or not (
        MIN_SUPPORTED_SCHEMA_VERSION <= version <= MAX_SUPPORTED_SCHEMA_VERSION
    ):
        raise SchemaVersionError(
            f"{source}: manifest schema_version {version!r} is not supported by this jaxport "
            f"(supported: {MIN_SUPPORTED_SCHEMA_VERSION}..{MAX_SUPPORTED_SCHEMA_VERSION}); "
            "re-export the model with a matching jaxport or upgrade jaxport"
        )


def _check_shape(shape: Iterable[int], what: str, source: str,
                 dim_names: Sequence[str] = (), polymorphic: bool = False) -> int:
    """The element count of a fixed shape; 0 for a shape with a symbolic axis, which is allowed
    only in a polymorphic program (or a TensorSpec) and only as -1 on an axis `dim_names`
    names."""
    dims = list(shape)
    if dim_names and (not polymorphic or len(dim_names) != len(dims)):
        raise ArtifactError(f"{source}: {what} has dim_names {list(dim_names)} but "
                            + ("is not in a polymorphic program" if not polymorphic else
                               f"{len(dims)} axes"))
    symbolic = False
    for axis, d in enumerate(dims):
        named = bool(dim_names) and bool(dim_names[axis])
        if named and d != -1:
            raise ArtifactError(f"{source}: {what} axis {axis} is symbolic "
                                f"({dim_names[axis]}) but its size is {d}, not -1")
        if d < 0 and not named:
            raise ArtifactError(f"{source}: {what} has a non-fixed shape {dims}; only fixed "
                                "shapes, or -1 on an axis dim_names names")
        symbolic = symbolic or named
    return 0 if symbolic else math.prod(dims)


def _check_rel_path(path: str, what: str, source: str) -> None:
    check_relative(path, f"{source}: {what}")


def _check_position(entry: manifest_pb2.Argument | manifest_pb2.Result, i: int, what: str,
                    source: str) -> None:
    """An argument or result sits at its own index (they list @main's in order) with a role
    (0 is UNSPECIFIED in both enums)."""
    if entry.index != i:
        raise ArtifactError(
            f"{source}: {what} has index {entry.index} but is at position {i}: the manifest "
            "must list @main's arguments and results in order (was the manifest edited?)"
        )
    if entry.role == 0:
        raise ArtifactError(f"{source}: {what} has no role")


def _check_mesh(manifest: manifest_pb2.Manifest, source: str) -> dict[str, int]:
    """A sharded manifest's mesh (axis name -> size; empty without one): named, unique axes
    whose sizes multiply to `nr_devices`."""
    if not manifest.HasField("mesh"):
        if manifest.nr_devices > 1:
            raise ArtifactError(f"{source}: nr_devices {manifest.nr_devices} without a mesh")
        return {}
    axes = {a.name: int(a.size) for a in manifest.mesh.axes}
    if not axes or len(axes) != len(manifest.mesh.axes) or "" in axes or \
            any(s < 1 for s in axes.values()):
        raise ArtifactError(f"{source}: mesh axes must be named, unique and of size >= 1, got "
                            f"{[(a.name, a.size) for a in manifest.mesh.axes]}")
    if math.prod(axes.values()) != manifest.nr_devices:
        raise ArtifactError(f"{source}: mesh {axes} is {math.prod(axes.values())} devices but "
                            f"nr_devices is {manifest.nr_devices}")
    return axes


def _check_sharding(entry: manifest_pb2.Argument | manifest_pb2.Result, axes: dict[str, int],
                    what: str, source: str) -> None:
    """In a sharded program every argument and result has a spec of one entry per axis over
    the mesh's axes, each used once, splitting its dimension evenly; elsewhere none."""
    if not axes:
        if entry.HasField("sharding"):
            raise ArtifactError(f"{source}: {what} has a sharding but the manifest no mesh")
        return
    spec = list(entry.sharding.spec)
    if len(spec) != len(entry.shape):
        raise ArtifactError(f"{source}: {what} sharding spec {spec} needs one entry per axis "
                            f"of shape {list(entry.shape)}")
    used: list[str] = []
    for dim, names in zip(entry.shape, spec, strict=True):
        parts = [n for n in names.split("+") if n]
        unknown = [n for n in parts if n not in axes or n in used]
        if unknown:
            raise ArtifactError(f"{source}: {what} sharding spec {spec}: mesh axis "
                                f"{unknown[0]!r} is unknown or used twice (mesh {axes})")
        used += parts
        if dim % math.prod(axes[n] for n in parts):
            raise ArtifactError(f"{source}: {what} sharding spec {spec} does not split shape "
                                f"{list(entry.shape)} evenly on mesh {axes}")


def exported_at(manifest: manifest_pb2.Manifest, source: str = MANIFEST_FILE
                ) -> datetime.datetime | None:
    """When the artifact was exported (UTC), or None when unknown (written before the field)."""
    if not manifest.exported_at:
        return None
    try:
        return datetime.datetime.strptime(manifest.exported_at, EXPORTED_AT_FORMAT).replace(
            tzinfo=datetime.UTC)
    except ValueError:
        raise ArtifactError(f"{source}: exportedAt {manifest.exported_at!r} is not a UTC "
                            "timestamp like 2026-12-01T00:41:07Z") from None


def _version_tuple(text: str) -> tuple[int, ...] | None:
    parts = text.split(".")
    return tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else None


def compatibility_warnings(manifest: manifest_pb2.Manifest, *,
                           now: datetime.datetime | None = None,
                           jax_version: str | None = None) -> list[str]:
    """One line per way the artifact may be outside jax's compatibility window: exported more
    than BACKWARD_COMPATIBILITY_DAYS ago (a jax released since may refuse it), or by a jax
    newer than the one installed here (`jax_version`, default: installed; jax promises only 3
    weeks of forward compatibility), or calling custom-call targets no promise covers
    (`allowed_custom_calls`). An artifact without `exported_at` has an unknown age."""
    out = []
    if manifest.allowed_custom_calls:
        out.append(
            f"the programs call custom call target(s) "
            f"{', '.join(manifest.allowed_custom_calls)} outside jax's compatibility guarantee "
            "(exported with --allow-custom-call): the process running them must register the "
            "same kernel (e.g. jax.ffi.register_ffi_target)")
    when = exported_at(manifest)
    if when is not None:
        age = ((now or datetime.datetime.now(datetime.UTC)) - when).days
        if age > BACKWARD_COMPATIBILITY_DAYS:
            out.append(
                f"exported {when:%Y-%m-%d} with jax {manifest.versions.jax}, {age} days ago: "
                "older than jax's 6-month backward-compatibility window for serialized exports "
                "(jax docs, jax.export 'Compatibility guarantees'); a jax released since may "
                "refuse it (override at your own risk: jax_export_deserialize_expired_versions)"
                ", so re-export it with the current jax")
    if jax_version is None:
        try:
            jax_version = importlib.metadata.version("jax")
        except importlib.metadata.PackageNotFoundError:
            jax_version = ""
    mine, theirs = _version_tuple(jax_version), _version_tuple(manifest.versions.jax)
    if mine is not None and theirs is not None and mine < theirs:
        out.append(
            f"exported with jax {manifest.versions.jax}, newer than this jax {jax_version}: "
            "jax promises only 3 weeks of forward compatibility (jax docs, jax.export "
            "'Compatibility guarantees'); upgrade jax here or re-export with this one")
    return out


def validate(manifest: manifest_pb2.Manifest, source: str = MANIFEST_FILE) -> None:
    """Check the manifest's invariants (manifest.proto); ArtifactError names the field."""
    _check_schema_version(manifest.schema_version, source)
    needed = schema_version_for(manifest)
    if manifest.schema_version < needed:
        raise SchemaVersionError(
            f"{source}: manifest schema_version {manifest.schema_version} cannot carry symbolic "
            f"dimensions or a device mesh; they need schema_version {needed}")
    exported_at(manifest, source)
    axes = _check_mesh(manifest, source)
    if not manifest.programs:
        raise ArtifactError(f"{source}: no programs")
    _check_dimensions(manifest, source)
    multi_platform = len(manifest.platforms) > 1
    for p, program in enumerate(manifest.programs):
        where = f"programs[{p}]"
        for attr in ("mlirbc_file", "jaxexport_file"):
            _check_rel_path(getattr(program, attr), f"{where}.{attr}", source)
        names: set[str] = set()
        for i, arg in enumerate(program.arguments):
            what = f"{where}.arguments[{i}] ({arg.name!r})"
            _check_position(arg, i, what, source)
            if arg.name in names:
                raise ArtifactError(f"{source}: {what}: duplicate argument name")
            names.add(arg.name)
            if arg.role == _ROLE.ARGUMENT_ROLE_TOKEN:
                continue
            n = _check_shape(arg.shape, what, source, arg.dim_names, program.polymorphic)
            _check_sharding(arg, axes, what, source)
            itemsize = numpy_dtype(arg.dtype).itemsize
            if arg.byte_size != n * itemsize:
                raise ArtifactError(
                    f"{source}: {what} byte_size {arg.byte_size} != {n} elements x {itemsize}"
                )
            if arg.role == _ROLE.ARGUMENT_ROLE_PARAMETER:
                if not arg.tensorstore_spec_json or len(arg.sha256) != 64:
                    raise ArtifactError(f"{source}: {what} lacks its tensorstore spec or sha256")
            if arg.role == _ROLE.ARGUMENT_ROLE_PLATFORM_INDEX:
                if i != 0:
                    raise ArtifactError(f"{source}: {what}: the platform index must be argument 0")
                # jax types it as its default int: int64 when lowered under jax_enable_x64.
                if arg.shape or arg.dtype.numpy not in ("int32", "int64"):
                    raise ArtifactError(
                        f"{source}: {what}: the platform index must be an int32 or int64 scalar, "
                        f"got {arg.dtype.numpy}{list(arg.shape)}"
                    )
        if multi_platform and (
            not program.arguments
            or program.arguments[0].role != _ROLE.ARGUMENT_ROLE_PLATFORM_INDEX
        ):
            raise ArtifactError(
                f"{source}: {where}: several platforms but argument 0 is not the platform index"
            )
        for i, res in enumerate(program.results):
            what = f"{where}.results[{i}] ({res.name!r})"
            _check_position(res, i, what, source)
            if res.role == _RROLE.RESULT_ROLE_TOKEN:
                continue
            n = _check_shape(res.shape, what, source, res.dim_names, program.polymorphic)
            _check_sharding(res, axes, what, source)
            if res.byte_size != n * numpy_dtype(res.dtype).itemsize:
                raise ArtifactError(f"{source}: {what} byte_size {res.byte_size} is inconsistent")
    for f in manifest.files:
        _check_rel_path(f.path, "files[]", source)
        if len(f.sha256) != 64:
            raise ArtifactError(f"{source}: files entry {f.path!r} has no sha256")


def _check_dimensions(manifest: manifest_pb2.Manifest, source: str) -> None:
    """Symbolic dimensions (schema 2): each well formed, and every named axis of an input or
    output is -1 and names one of them."""
    declared = set()
    for d in manifest.dimensions:
        if not d.name or d.name in declared or not 1 <= d.min <= d.max or d.multiple_of < 1 \
                or d.min % d.multiple_of or d.max % d.multiple_of:
            raise ArtifactError(f"{source}: dimensions entry {d.name!r} is malformed "
                                f"({d.min}..{d.max}, multiple of {d.multiple_of})")
        declared.add(d.name)
    for kind, specs in (("inputs", manifest.inputs), ("outputs", manifest.outputs)):
        for spec in specs:
            if not spec.dim_names:
                continue
            what = f"{kind}[{spec.name!r}]"
            _check_shape(spec.shape, what, source, spec.dim_names, polymorphic=True)
            unknown = [n for n in spec.dim_names if n and n not in declared]
            if unknown:
                raise ArtifactError(f"{source}: {what} names dimension {unknown[0]!r}, which "
                                    "manifest.dimensions does not declare")
    inputs = {i.name for i in manifest.inputs}
    for pad in manifest.padding:
        if pad.dim not in declared or pad.mask_input not in inputs:
            raise ArtifactError(f"{source}: padding entry {pad.dim}={pad.mask_input} names an "
                                "undeclared dimension or an input the model does not have")
    if any(p.polymorphic for p in manifest.programs) and not declared:
        raise ArtifactError(f"{source}: a polymorphic program but no manifest.dimensions")


def check_paths(artifact_dir: str | os.PathLike[str] | Location,
                manifest: manifest_pb2.Manifest) -> None:
    """Every path the manifest names leads inside `artifact_dir` (on disk: symlinks followed;
    by URL: below its URL), and every program file carries a checksum. ArtifactError names
    the offending entry."""
    root = locate(artifact_dir)
    listed = set()
    for entry in manifest.files:
        root.resolve(entry.path, f"files[{entry.path!r}]")
        listed.add(entry.path)
    for p in manifest.programs:
        for what, rel in (("mlirbc_file", p.mlirbc_file), ("jaxexport_file", p.jaxexport_file)):
            root.resolve(rel, what)
            if rel not in listed:
                raise ArtifactError(f"{what} {rel!r} has no checksum in manifest.files; refused")
        for arg in p.arguments:
            if arg.role == _ROLE.ARGUMENT_ROLE_PARAMETER:
                _check_tensorstore_spec(root, arg)
    for out in manifest.outputs:
        if out.labels_file:
            what = f"outputs[{out.name!r}].labels_file"
            root.resolve(out.labels_file, what)
            if out.labels_file not in listed:
                raise ArtifactError(
                    f"{what} {out.labels_file!r} has no checksum in manifest.files; refused")


def _check_tensorstore_spec(root: Location, arg: manifest_pb2.Argument) -> None:
    what = f"parameter '{arg.name}'"
    try:
        spec = json.loads(arg.tensorstore_spec_json)
    except ValueError as exc:
        raise ArtifactError(f"{what}: tensorstore_spec_json is not JSON: {exc}") from None
    kv = spec.get("kvstore") if isinstance(spec, dict) else None
    if not isinstance(kv, dict) or kv.get("driver") != "file" or \
            not isinstance(kv.get("path"), str):
        raise ArtifactError(f"{what}: weights must come from a local 'file' kvstore, got {kv!r}")
    root.resolve(kv["path"].rstrip("/"), what)


def _kv_path(arg: manifest_pb2.Argument) -> str:
    try:
        return str(json.loads(arg.tensorstore_spec_json)["kvstore"]["path"])
    except (ValueError, KeyError, TypeError):
        return "unknown path"


def verify_files(artifact_dir: str | os.PathLike[str] | Location,
                 manifest: manifest_pb2.Manifest) -> None:
    """Check every listed file and every parameter against its sha256.

    Raises ChecksumError naming the file (or parameter) with the expected and actual digest.
    Files referenced by programs and goldens must be listed, so nothing escapes the check.
    """
    root = locate(artifact_dir)
    listed = {f.path for f in manifest.files}
    needed = set()
    for program in manifest.programs:
        needed.update(p for p in (program.mlirbc_file, program.jaxexport_file) if p)
    for case in manifest.goldens:
        needed.update(case.inputs.values())
        needed.update(case.outputs.values())
        needed.update(case.check_outputs.values())
    missing = sorted(needed - listed)
    if missing:
        raise ArtifactError(
            f"{root}: {missing[0]} is used by the manifest but not in its file list"
        )
    for entry in manifest.files:
        where = root.display(entry.path)
        found = root.size_and_sha256(entry.path)
        if found is None:
            raise ChecksumError(f"{where}: file listed in the manifest is missing")
        size, actual = found
        if size != entry.size_bytes:
            raise ChecksumError(
                f"{where}: size {size} bytes, manifest says {entry.size_bytes} "
                "(truncated or replaced?)"
            )
        if actual != entry.sha256:
            raise ChecksumError(
                f"{where}: sha256 mismatch: expected {entry.sha256}, actual {actual}"
            )
    # Parameters are checked again as arrays: a consumer may open them with any zarr reader, so
    # the array-level digest is the one that matters across implementations.
    from jaxport.artifact import weights

    seen: set[str] = set()
    for program in manifest.programs:
        for arg in program.arguments:
            if arg.role != _ROLE.ARGUMENT_ROLE_PARAMETER or arg.name in seen:
                continue
            seen.add(arg.name)
            array = weights.read_parameter(root, arg)
            actual = weights.array_sha256(array)
            if actual != arg.sha256:
                raise ChecksumError(
                    f"{root}: parameter {arg.name!r} ({_kv_path(arg)}) sha256 mismatch: "
                    f"expected {arg.sha256}, actual {actual}"
                )
