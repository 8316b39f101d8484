"""Run schemathesis against a server with the Open Inference Protocol's REST spec and sort what
it finds into documented spec gaps and real failures.

Each failing test case in schemathesis' JUnit report names its checks (`- ST103 ...`) and the
status it received (`[404] Not Found:`); a (check, status) pair listed in SPEC_GAPS is a known
difference between the generic spec and OVMS's behaviour, anything else is a failure.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tests.conformance import spec

# (schemathesis check code, HTTP status) -> why this server answers so, deliberately
SPEC_GAPS: dict[tuple[str, int], str] = {
    ("ST103", 404): "unknown model, version or URL: 404 with the error object, as OVMS answers; "
    "the spec documents only 200 (and 400 for infer)",
    ("ST103", 412): "a body that is not JSON: 412, as OVMS answers it; the spec documents 400",
    ("ST201", 412): "the same 412 for a body that is not JSON (schemathesis counts only 400, "
    "422 and a few others as a rejection)",
    ("ST202", 412): "an empty body is schema-valid (the spec does not require one) but is not "
    "JSON: 412, as OVMS",
    ("ST202", 400): "a request that fits the generic schema but not the model's signature "
    "(input names, datatypes, shapes): 400 with OVMS's message; the spec cannot "
    "describe a model's inputs",
}
_CASE = re.compile(r"^\d+\. Test Case ID: \S+$", re.MULTILINE)
_CHECK = re.compile(r"^- (ST\d+) ", re.MULTILINE)
_STATUS = re.compile(r"^\[(\d{3})\] ", re.MULTILINE)


@dataclass
class Run:
    operations: int
    test_cases: int
    exit_code: int
    gaps: Counter[tuple[str, int]] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)  # case texts with an unexpected finding
    kinds: Counter[str] = field(default_factory=Counter)  # "ST103 404" -> cases

    def summary(self) -> str:
        kinds = ", ".join(f"{kind}: {count}" for kind, count in sorted(self.kinds.items()))
        return (
            f"{self.operations} operations, {self.test_cases} test cases (requests), "
            f"{len(self.failures)} unexpected failing cases; by kind: {kinds or 'none'}"
        )


def write_spec(path: Path, models: list[str], versions: list[str]) -> Path:
    path.write_text(yaml.safe_dump(spec.load(models, versions), sort_keys=False))
    return path


def run(
    url: str,
    spec_path: Path,
    report_dir: Path,
    *,
    max_examples: int,
    max_time: int,
    seed: int,
    extra: tuple[str, ...] = (),
) -> Run:
    """One bounded schemathesis run (all its phases and default checks) against `url`."""
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        str(spec_path),
        "--url",
        url,
        "--max-examples",
        str(max_examples),
        "--max-time",
        str(max_time),
        "--seed",
        str(seed),
        "--workers",
        "1",
        "--request-timeout",
        "60",
        "--no-color",
        "--report",
        "json,junit",
        "--report-dir",
        str(report_dir),
        *extra,
    ]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=max_time * 3 + 120,
        check=False,
        cwd=report_dir,
    )  # its example database stays there
    reports = {p.suffix: p for p in report_dir.iterdir() if p.is_file()}
    if ".json" not in reports or ".xml" not in reports:
        raise AssertionError(
            f"schemathesis wrote no report:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return _read(json.loads(reports[".json"].read_text()), reports[".xml"])


def _read(report: dict[str, object], junit: Path) -> Run:
    operations = report["operations"]
    cases = report["test_cases"]
    assert isinstance(operations, dict) and isinstance(cases, dict)
    result = Run(operations["tested"], cases["generated"], int(str(report["exit_code"])))
    for case in _cases(junit):
        checks, statuses = _CHECK.findall(case), _STATUS.findall(case)
        status = int(statuses[0]) if statuses else 0
        unexpected = not checks
        for check in checks:
            result.kinds[f"{check} {status}"] += 1
            if (check, status) in SPEC_GAPS:
                result.gaps[(check, status)] += 1
            else:
                unexpected = True
        if unexpected:
            result.failures.append(case)
    return result


def _cases(junit: Path) -> list[str]:
    texts = []
    for element in ET.parse(junit).iter():
        if element.tag in ("failure", "error"):
            text = element.text or element.get("message") or ""
            starts = [m.start() for m in _CASE.finditer(text)] or [0]
            texts += [
                text[a:b].strip() for a, b in zip(starts, [*starts[1:], len(text)], strict=True)
            ]
    return texts
