"""Structured logs: one JSON object per line on stderr.

Fields: `ts` (UTC ISO 8601), `level`, `logger`, `msg`, then whatever the call passed as
`extra={"fields": {...}}`, and `exc` (the traceback) when one is attached. Tracebacks only ever
go here, never to a caller, and only for bugs in our code: what callers can cause (undecodable
messages, cancelled calls) is logged at most at WARNING, rate-limited (`Throttled`), without one.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TextIO


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure(level: str = "INFO", stream: TextIO | None = None) -> None:
    """Route every logger of the process to one JSON-lines handler at `level`."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # jax/absl chatter at INFO is noise for a server operator.
    for noisy in ("jax", "absl"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))


class Throttled:
    """Rate-limited records for what hostile or impatient callers can cause at any rate
    (undecodable messages, cancelled calls): per key at most one record every `interval_s`;
    the next one carries `suppressed`, how many were left out since. Never a traceback."""

    def __init__(self, logger: logging.Logger, interval_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._logger = logger
        self._interval = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._next: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def log(self, level: int, key: str, msg: str, fields: dict[str, Any]) -> bool:
        """Log `msg` at `level` unless `key` was logged less than `interval_s` ago; True if
        it was logged."""
        now = self._clock()
        with self._lock:
            if now < self._next.get(key, float("-inf")):
                self._suppressed[key] = self._suppressed.get(key, 0) + 1
                return False
            self._next[key] = now + self._interval
            suppressed = self._suppressed.pop(key, 0)
        self._logger.log(level, msg, extra={"fields": {**fields, "suppressed": suppressed}})
        return True
