"""Fixtures of the fuzz tests; see fuzzing.py for the rules and the record of inputs tried."""

from __future__ import annotations

import pytest
from fuzzing import RECORD, Record


@pytest.fixture
def fuzz() -> Record:
    return RECORD


def pytest_sessionfinish(session):
    """Each process (a pytest-xdist worker, or the only one) leaves its tally for the summary
    that tests/conftest.py prints at the end of the run."""
    RECORD.save_part()
