"""Framing names have one home, :mod:`pyspark_gazette.message`: code elsewhere compares a
framing's name with the constants it exports (``NDJSON.name``) or asks its properties
(``json_documents``, ``line_based``), never with a literal name."""

from __future__ import annotations

import ast
from pathlib import Path

import pyspark_gazette
from pyspark_gazette.message import FRAMINGS

PACKAGE = Path(pyspark_gazette.__file__).parent


def name_literals(source: str) -> list[str]:
    """Framing names written as string literals in comparisons of ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(
            isinstance(value, ast.Constant) and value.value in FRAMINGS
            for side in (node.left, *node.comparators)
            for value in ast.walk(side)
        ):
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_framing_name_literal_outside_message():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.relative_to(PACKAGE).parts[0] == "message":
            continue
        found += [f"{path.relative_to(PACKAGE)} {use}" for use in name_literals(path.read_text())]
    assert found == []


def test_the_check_sees_literal_names():
    assert name_literals('head = 1 if framing.name == "ndjson" else None\n') == ["line 1: framing.name == 'ndjson'"]
    assert name_literals('ok = name in ("csv", "lines")\n') == ["line 1: name in ('csv', 'lines')"]
    assert name_literals("head = 1 if framing.name == NDJSON.name else None\n") == []
