"""Sample tensors of every protocol datatype and the checks the codec tests share
(tests/protocol/test_protocol_codecs.py, tests/exporter/test_sharding.py)."""

from __future__ import annotations

import numpy as np
import pytest
from jaxport.protocol import dtypes
from jaxport.protocol.errors import InvalidArgumentError

ALL = [d.datatype for d in dtypes.DTYPES]
TYPED = [d.datatype for d in dtypes.DTYPES if d.contents_field is not None]
RAW_ONLY = [d.datatype for d in dtypes.DTYPES if d.contents_field is None]


def sample(datatype: str, shape: tuple[int, ...] = (2, 3), seed: int = 0) -> np.ndarray:
    """Values spanning the dtype's range (extremes, negatives, NaN/inf for floats)."""
    row = dtypes.by_datatype(datatype)
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if datatype == "BOOL":
        return rng.integers(0, 2, n).astype(bool).reshape(shape)
    if row.numpy.kind in "iu":
        info = np.iinfo(row.numpy)
        values = rng.integers(info.min, info.max, n, dtype=row.numpy, endpoint=True)
        values[: min(n, 2)] = [info.min, info.max][: min(n, 2)]
        return values.reshape(shape)
    values = (rng.standard_normal(n) * 100).astype(row.numpy)
    specials = np.array([np.nan, np.inf, -np.inf, -0.0], dtype=np.float64).astype(row.numpy)
    values[: min(n, 4)] = specials[: min(n, 4)]
    return values.reshape(shape)


def assert_same(got: np.ndarray, want: np.ndarray) -> None:
    """Same dtype, shape and bits (NaN-safe: exact round trips, so compare bytes)."""
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def invalid(fn, *args, **kwargs) -> str:
    with pytest.raises(InvalidArgumentError) as info:
        fn(*args, **kwargs)
    assert info.value.code == "INVALID_ARGUMENT"
    return info.value.message
