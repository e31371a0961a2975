"""The one datatype table of jaxport.

Every place that maps between a numpy dtype, an Open Inference Protocol (KServe v2) datatype
string, an MLIR/StableHLO element type, a byte width and a typed-contents field of
`InferTensorContents` reads it from here: the exporter (manifest), the bridge (codecs,
metadata) and the Python client. Inverse maps are derived, never written by hand.

Byte order on the wire and in artifacts is little-endian (`<`), as the protocol says.
BF16 uses `ml_dtypes.bfloat16`; FP16 and BF16 have no typed-contents field and travel only as
raw bytes (2 bytes per element).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

import ml_dtypes
import numpy as np

__all__ = [
    "DTYPES",
    "DType",
    "UnsupportedDtypeError",
    "by_datatype",
    "by_mlir",
    "by_numpy",
    "supported_datatypes",
]


class UnsupportedDtypeError(ValueError):
    """A dtype, datatype string or MLIR type that jaxport cannot carry."""


@dataclass(frozen=True)
class DType:
    """One row of the table.

    numpy_name: canonical numpy name (`float32`, `bfloat16`, `bool`).
    datatype: Open Inference Protocol datatype (`FP32`, `BF16`, `BOOL`).
    mlir: StableHLO element type (`f32`, `bf16`, `i1`, `ui8`).
    itemsize: bytes per element on the wire and in `.npy`/zarr.
    contents_field: `InferTensorContents` field for typed contents, or None (raw only).
    """

    numpy_name: str
    datatype: str
    mlir: str
    itemsize: int
    contents_field: str | None

    @property
    def numpy(self) -> np.dtype:
        """The little-endian numpy dtype of this row."""
        return _NUMPY[self.numpy_name]


_NUMPY: dict[str, np.dtype] = {
    "bool": np.dtype("bool"),
    "uint8": np.dtype("<u1"),
    "uint16": np.dtype("<u2"),
    "uint32": np.dtype("<u4"),
    "uint64": np.dtype("<u8"),
    "int8": np.dtype("<i1"),
    "int16": np.dtype("<i2"),
    "int32": np.dtype("<i4"),
    "int64": np.dtype("<i8"),
    "float16": np.dtype("<f2"),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "float32": np.dtype("<f4"),
    "float64": np.dtype("<f8"),
}

DTYPES: tuple[DType, ...] = (
    DType("bool", "BOOL", "i1", 1, "bool_contents"),
    DType("uint8", "UINT8", "ui8", 1, "uint_contents"),
    DType("uint16", "UINT16", "ui16", 2, "uint_contents"),
    DType("uint32", "UINT32", "ui32", 4, "uint_contents"),
    DType("uint64", "UINT64", "ui64", 8, "uint64_contents"),
    DType("int8", "INT8", "i8", 1, "int_contents"),
    DType("int16", "INT16", "i16", 2, "int_contents"),
    DType("int32", "INT32", "i32", 4, "int_contents"),
    DType("int64", "INT64", "i64", 8, "int64_contents"),
    DType("float16", "FP16", "f16", 2, None),
    DType("bfloat16", "BF16", "bf16", 2, None),
    DType("float32", "FP32", "f32", 4, "fp32_contents"),
    DType("float64", "FP64", "f64", 8, "fp64_contents"),
)

_BY_NUMPY = MappingProxyType({d.numpy_name: d for d in DTYPES})
_BY_DATATYPE = MappingProxyType({d.datatype: d for d in DTYPES})
_BY_MLIR = MappingProxyType({d.mlir: d for d in DTYPES})
# Exact dtype objects (native = little-endian here, and `<`): the per-request fast path.
_BY_DTYPE = MappingProxyType(
    {dt: d for d in DTYPES for dt in (d.numpy, d.numpy.newbyteorder("="))})


def supported_datatypes() -> tuple[str, ...]:
    """OIP datatype strings jaxport carries, in table order."""
    return tuple(d.datatype for d in DTYPES)


def by_numpy(dtype: np.dtype | type | str) -> DType:
    """Row for a numpy dtype (any byte order in, the canonical little-endian row out)."""
    if isinstance(dtype, np.dtype):
        row = _BY_DTYPE.get(dtype)
        if row is not None:
            return row
    try:
        name = np.dtype(dtype).name
    except TypeError as exc:
        raise UnsupportedDtypeError(
            f"unsupported dtype {dtype!r}; supported: {', '.join(_BY_NUMPY)}"
        ) from exc
    row = _BY_NUMPY.get(name)
    if row is None:
        raise UnsupportedDtypeError(
            f"unsupported dtype {name!r}; supported: {', '.join(_BY_NUMPY)}"
        )
    return row


def by_datatype(datatype: str) -> DType:
    """Row for an Open Inference Protocol datatype string such as `FP32`."""
    row = _BY_DATATYPE.get(datatype)
    if row is None:
        raise UnsupportedDtypeError(
            f"unsupported datatype {datatype!r}; supported: {', '.join(_BY_DATATYPE)}"
        )
    return row


def by_mlir(element_type: str) -> DType:
    """Row for a StableHLO element type such as `bf16` or `i1`."""
    row = _BY_MLIR.get(element_type)
    if row is None:
        raise UnsupportedDtypeError(
            f"unsupported MLIR element type {element_type!r}; supported: {', '.join(_BY_MLIR)}"
        )
    return row
