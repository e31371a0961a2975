"""The checks `jaxport verify` runs, their results (what a worker prints as JSON and the parent
reads back) and the table the command prints."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from jaxport.exporter.verify.tolerances import Comparison

__all__ = ["CHECKS", "KNOWN_PLATFORMS", "PLATFORM_CHECKS", "CheckResult", "format_table",
           "result"]

CHECKS = ("checksums", "jaxexport", "pjrt", "pjrt-c-api", "iree")
# The checks that execute the program with jax's runtime on a platform (IREE is llvm-cpu).
PLATFORM_CHECKS = ("jaxexport", "pjrt")
KNOWN_PLATFORMS = ("cpu", "cuda", "rocm", "tpu")


@dataclass
class CheckResult:
    """Outcome of one check: status is "pass", "fail" or "skip"."""

    check: str
    status: str
    detail: str = ""
    comparisons: list[Comparison] = field(default_factory=list)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CheckResult:
        comps = [Comparison(**c) for c in data.get("comparisons", [])]
        return cls(data["check"], data["status"], data.get("detail", ""), comps)


def result(check: str, comps: dict[str, Comparison], detail: str) -> CheckResult:
    """An execution check's result from its comparisons: pass when every output passed, fail
    when one did not or there was nothing to compare."""
    if not comps:
        return CheckResult(check, "fail", "no golden cases to compare against")
    ok = all(c.passed for c in comps.values())
    return CheckResult(check, "pass" if ok else "fail", detail, list(comps.values()))


def format_table(results: Sequence[CheckResult]) -> str:
    """Table of check, output, max abs/rel error, tolerance, result; then details."""
    rows = [("check", "output", "max abs err", "max rel err", "tolerance", "result")]
    for r in results:
        if not r.comparisons:
            rows.append((r.check, "-", "-", "-", "-", r.status.upper()))
        for c in r.comparisons:
            rows.append((r.check, c.output, f"{c.max_abs:.3g}", f"{c.max_rel:.3g}", c.tolerance,
                         "PASS" if c.passed else "FAIL"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
             for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in results:
        if r.detail:
            lines.append(f"{r.check}: {r.status}: {r.detail}")
    return "\n".join(lines)
