"""Structured logs of an execution worker: one JSON object per line on stderr (the front's
stderr, next to its own JSON lines).

Fields: `ts` (UTC ISO 8601), `level`, `logger`, `msg`, then whatever the call passed as
`extra={"fields": {...}}`, and `exc` (the traceback) when one is attached. Tracebacks only ever
go here, never to a caller.
"""

from __future__ import annotations

import json
import logging
import sys
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
