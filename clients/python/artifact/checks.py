"""The consumer side of checkify checks in an artifact: the check table, its output layout and
failure formatting. numpy only: no jax, no gRPC.

An exported program reports its runtime checks as extra results (role CHECK) after its outputs:
per *error effect* a predicate (did any check of this effect fire), a code (which check fired
first) and payload arrays (runtime values the message needs). The manifest's `checks` table lists
every code the program can report with its kind, message template and payload layout. The
producer side (tracing, instrumentation, golden coverage) is `jaxport.exporter.checks`.

Canonical check-output order (what `Program.results` with role CHECK holds, after the outputs):
effects in ascending `ErrorCode.effect`; for each effect its `predicate` (bool[]), its `code`
(int32[]) then its payload leaves (`payload_size` of them, in order).

Reading a failure (mirrors `Error.get()`): among effects whose predicate is true, take the one
whose code is smallest; look the code up in the table; format its `message_template` with
Python `str.format` semantics where `{N}` is payload leaf N of that effect (a 0-d leaf as a
scalar, else the array as numpy prints it) and `{N[i]}` is element i of leaf N. The result is
exactly the text `err.get()` gives in JAX.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from jaxport.artifact.errors import CheckFailedError
from jaxport.artifact.gen import manifest_pb2
from jaxport.protocol.errors import Code

__all__ = ["KINDS", "STATUS", "check_layout", "format_failure", "raise_if_fired"]

#: Check kinds, in canonical order: user `checkify.check`, out-of-bounds indexing, NaN
#: produced, division by zero.
KINDS: tuple[str, ...] = ("user", "index", "nan", "div")

#: The status a failed check of each kind reaches a caller with. user/index: the request's
#: inputs violate what the model accepts, so the caller must change them (INVALID_ARGUMENT).
#: nan/div: the request is well formed but the model cannot compute a finite result for it
#: (FAILED_PRECONDITION); neither is retryable as is.
STATUS: Mapping[str, Code] = {
    "user": Code.INVALID_ARGUMENT,
    "index": Code.INVALID_ARGUMENT,
    "nan": Code.FAILED_PRECONDITION,
    "div": Code.FAILED_PRECONDITION,
}


def check_layout(checks: manifest_pb2.Checks) -> list[tuple[str, int]]:
    """The (part, effect) of each check output, in canonical order, from the table alone."""
    payload_size: dict[int, int] = {}
    for c in checks.codes:
        if payload_size.setdefault(c.effect, c.payload_size) != c.payload_size:
            raise ValueError(f"error table: effect {c.effect} has inconsistent payload sizes")
    layout: list[tuple[str, int]] = []
    for e in sorted(payload_size):
        layout += [("predicate", e), ("code", e)] + [("payload", e)] * payload_size[e]
    return layout


def _as_value(a: np.ndarray) -> Any:
    # JAX formats a 0-d array as its scalar and anything else as the array (numpy's rules).
    a = np.asarray(a)
    return a[()] if a.ndim == 0 else a


def format_failure(
    checks: manifest_pb2.Checks, check_values: Sequence[np.ndarray]
) -> tuple[str, str] | None:
    """(kind, message) of the first failed check, or None if every check passed.

    `check_values` are the program's check outputs in canonical order (see module docstring).
    The message is what `err.get()` returns in JAX for the same inputs.
    """
    layout = check_layout(checks)
    if len(check_values) != len(layout):
        raise ValueError(
            f"expected {len(layout)} check outputs for this error table, got {len(check_values)}"
        )
    pred: dict[int, bool] = {}
    code: dict[int, int] = {}
    payload: dict[int, list[Any]] = {}
    for (part, e), v in zip(layout, check_values, strict=True):
        if part == "predicate":
            pred[e] = bool(np.asarray(v))
        elif part == "code":
            code[e] = int(np.asarray(v))
        else:
            payload.setdefault(e, []).append(_as_value(v))
    fired = [e for e in pred if pred[e]]
    if not fired:
        return None
    first = min(fired, key=lambda e: code[e])
    by_code = {c.code: c for c in checks.codes}
    entry = by_code.get(code[first])
    if entry is None or entry.effect != first:
        raise ValueError(
            f"check output reports code {code[first]} for effect {first}, "
            "which the error table does not list"
        )
    return entry.kind, entry.message_template.format(*payload.get(first, []))


def raise_if_fired(checks: manifest_pb2.Checks, check_values: Sequence[np.ndarray]) -> None:
    """Raise `CheckFailedError(kind, err.get() text)` when a check fired; return otherwise."""
    failure = format_failure(checks, check_values)
    if failure is not None:
        raise CheckFailedError(*failure)
