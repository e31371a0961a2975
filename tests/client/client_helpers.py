"""Helpers shared by the client test files (a uniquely named module, not conftest, so test
files can import it whatever other conftest.py files the same pytest run loads)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from jaxport.client import InferenceServerError
from support.bridge import BridgeProcess
from support.certs import Pki

TOKEN = "s3cret"


@dataclass(frozen=True)
class Server:
    """What the `server` fixture gives: the session bridge and its `HOST:PORT` (the shape
    test_client_install.py was written against)."""

    url: str
    bridge: BridgeProcess

#: (rtol, atol) per dtype for outputs the bridge computes, against JAX run in this process.
#: Same XLA CPU backend on both sides, so differences are rounding at most. BF16 keeps 8
#: significant bits (relative step 2**-7), so it gets a tolerance of one such step.
TOLERANCES: dict[np.dtype, tuple[float, float]] = {
    np.dtype(np.float32): (1e-6, 1e-6),
    np.dtype(np.float64): (1e-12, 1e-12),
    np.dtype(np.float16): (1e-3, 1e-3),
    np.dtype(ml_dtypes.bfloat16): (2.0**-7, 2.0**-7),
}


def mtls(pki: Pki) -> dict[str, bytes]:
    """InferenceClient keyword arguments for mutual TLS with the test PKI's client identity."""
    return {"root_certificates": pki.read("ca_cert"),
            "client_certificate": pki.read("client_cert"),
            "client_key": pki.read("client_key")}


def same(got: np.ndarray, want: np.ndarray) -> bool:
    """Same dtype, shape and bytes (NaN payloads and signed zeros included)."""
    return got.dtype == want.dtype and got.shape == want.shape and got.tobytes() == want.tobytes()


def assert_matches_jax(got: np.ndarray, want: np.ndarray, what: str) -> None:
    """`got` (from the bridge) equals JAX's `want`: exactly for integers/BOOL, within
    TOLERANCES for floating point."""
    assert got.dtype == want.dtype and got.shape == want.shape, (what, got.dtype, got.shape)
    if want.dtype in TOLERANCES:
        rtol, atol = TOLERANCES[want.dtype]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=rtol, atol=atol, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def server_error(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> InferenceServerError:
    """The InferenceServerError that `fn(*args, **kwargs)` raises (fails if none)."""
    with pytest.raises(InferenceServerError) as info:
        fn(*args, **kwargs)
    return info.value
