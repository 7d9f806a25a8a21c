"""Tests that need a tool outside Python (real Gazette, gazctl, a store emulator, a CLI, the C
scanner, network namespaces) call ``require_tool`` or ``missing_tool`` when it is absent.

Where it is absent the test skips, saying how to get the tool; with ``GAZETTE_REQUIRE_TOOLS=1``
(CI sets it) the test fails instead, so the checks that need those tools really run there.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def required() -> bool:
    """Whether a missing tool fails the test (``GAZETTE_REQUIRE_TOOLS=1``) rather than skips it."""
    return os.environ.get("GAZETTE_REQUIRE_TOOLS") == "1"


def missing_tool(reason: str) -> NoReturn:
    """Skip the calling test for a missing tool, ``reason`` saying which and how to get it; or,
    with ``GAZETTE_REQUIRE_TOOLS=1``, fail it. The report names the caller's line."""
    __tracebackhide__ = True
    if required():
        pytest.fail(f"required tool missing in CI: {reason}", pytrace=False)
    pytest.skip(reason)


def require_tool(name: str, why: str) -> NoReturn:
    """``missing_tool`` for the tool ``name`` (``"<name> is not installed: <why>"``)."""
    __tracebackhide__ = True
    missing_tool(f"{name} is not installed: {why}" if why else f"{name} is not installed")
