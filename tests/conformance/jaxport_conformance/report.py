"""A run's results and the three forms they are written in: the text lines every runner prints
(`PASS`/`FAIL`/`N/A` per case, then `conformance <label>: N passed, M failed[, K not
applicable]`), JSON (`--json FILE`) and JUnit XML (`--junit FILE`, one testsuite whose tests /
failures / skipped counts are the text summary's passed+failed+N/A / failed / N/A)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

PASS, FAIL, NOT_APPLICABLE = "PASS", "FAIL", "N/A"


@dataclass
class Result:
    """One case: its status, why (a failure's message, an N/A's missing features) and time."""

    name: str
    status: str
    message: str = ""
    seconds: float = 0.0

    def line(self) -> str:
        if self.status == PASS:
            return f"PASS {self.name} ({self.seconds * 1e3:.0f} ms)"
        if self.status == FAIL:
            return f"FAIL {self.name}: {self.message}"
        return f"N/A {self.name} ({self.message})"


@dataclass
class Report:
    """Every result of one run, in case order; `label` names the runner ("python", "go", ...).
    `always_tail` prints "K not applicable" even when K is 0 (the REST runner's summary)."""

    label: str
    features: list[str] | None = None  # claimed features; None = all
    results: list[Result] = field(default_factory=list)
    always_tail: bool = False

    def count(self, status: str) -> int:
        return sum(r.status == status for r in self.results)

    def summary(self) -> str:
        na = self.count(NOT_APPLICABLE)
        tail = f", {na} not applicable" if na or self.always_tail else ""
        return (f"conformance {self.label}: {self.count(PASS)} passed, "
                f"{self.count(FAIL)} failed{tail}")

    def to_json(self) -> dict:
        return {"runner": self.label, "features": self.features,
                "passed": self.count(PASS), "failed": self.count(FAIL),
                "not_applicable": self.count(NOT_APPLICABLE),
                "cases": [asdict(r) for r in self.results]}

    def to_junit(self) -> ET.ElementTree:
        """JUnit XML: <testsuites><testsuite> with a <testcase> per case, <failure> for FAIL,
        <skipped> for N/A."""
        total = sum(r.seconds for r in self.results)
        suites = ET.Element("testsuites", name="jaxport-conformance")
        suite = ET.SubElement(suites, "testsuite", {
            "name": f"conformance {self.label}", "tests": str(len(self.results)),
            "failures": str(self.count(FAIL)), "errors": "0",
            "skipped": str(self.count(NOT_APPLICABLE)), "time": f"{total:.3f}"})
        for r in self.results:
            case = ET.SubElement(suite, "testcase", {
                "classname": f"conformance.{self.label}", "name": r.name,
                "time": f"{r.seconds:.3f}"})
            if r.status == FAIL:
                ET.SubElement(case, "failure", message=r.message).text = r.message
            elif r.status == NOT_APPLICABLE:
                ET.SubElement(case, "skipped", message=r.message)
        return ET.ElementTree(suites)

    def write(self, json_path: Path | None, junit_path: Path | None) -> None:
        if json_path:
            Path(json_path).write_text(json.dumps(self.to_json(), indent=2) + "\n",
                                       encoding="utf-8")
        if junit_path:
            tree = self.to_junit()
            ET.indent(tree)
            tree.write(junit_path, encoding="utf-8", xml_declaration=True)
