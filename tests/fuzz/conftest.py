"""Fixtures of the fuzz tests; see fuzzing.py for the rules and the record of inputs tried."""

from __future__ import annotations

import json

import pytest
from fuzzing import EXAMPLES, RECORD, REPORT_PATH, Record


@pytest.fixture
def fuzz() -> Record:
    return RECORD


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not RECORD.targets:
        return
    terminalreporter.section("fuzz inputs tried")
    for line in RECORD.lines():
        terminalreporter.write_line(line)
    REPORT_PATH.parent.mkdir(parents=True, exist_ok=True)
    data = {k: {**v, "outcomes": dict(v["outcomes"])} for k, v in RECORD.targets.items()}
    REPORT_PATH.write_text(json.dumps({"examples_per_target": EXAMPLES, "targets": data}, indent=2))
    terminalreporter.write_line(f"fuzz report written to {REPORT_PATH}")
