"""Each rule of the package has one home: no module imports another module's private (``_``)
name, nor reaches one through an attribute of an imported name. Private *modules* (whole
modules whose names start with ``_``) may be imported; they are listed here."""

from __future__ import annotations

import ast
from pathlib import Path

import pyspark_gazette

PACKAGE = Path(pyspark_gazette.__file__).parent

#: Private modules that other modules of the package may import (as modules).
PRIVATE_MODULES = {"_forks", "_fs", "_jsonscan"}

#: Names whose attributes are generated from the protocol schema and keep its names
#: (``pb.FragmentsResponse._Fragment``).
GENERATED = {"pb"}


def _module_name(path: Path) -> str:
    parts = ["pyspark_gazette", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def private_uses(source: str, module: str, is_package: bool = False) -> list[str]:
    """Where ``source`` (the text of ``module``) uses another module's private name."""
    tree = ast.parse(source)
    found, imported = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            origin = _absolute(node, module, is_package)
            if origin.split(".")[0] != "pyspark_gazette" or origin == module:
                continue
            for alias in node.names:
                imported.add(alias.asname or alias.name)
                if _private(alias.name) and alias.name not in PRIVATE_MODULES:
                    found.append(f"line {node.lineno}: from {origin} import {alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "pyspark_gazette":
                    imported.add((alias.asname or alias.name).split(".")[0])
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if isinstance(base, ast.Name) and base.id in imported and base.id not in PRIVATE_MODULES | GENERATED:
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_uses_another_modules_private_names():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for use in private_uses(path.read_text(), _module_name(path), path.name == "__init__.py"):
            found.append(f"{path.relative_to(PACKAGE)} {use}")
    assert found == []


def test_the_check_sees_private_imports_and_attributes():
    module = "pyspark_gazette.spark.read.pack"
    assert private_uses("from pyspark_gazette.spark.read.plan import _split_tail\n", module) == [
        "line 1: from pyspark_gazette.spark.read.plan import _split_tail"
    ]
    assert private_uses("from .plan import (\n    Segment,\n    _split_tail,\n)\n", module) == [
        "line 1: from pyspark_gazette.spark.read.plan import _split_tail"
    ]
    assert private_uses("from pyspark_gazette.message import Sequencer\nSequencer._log(1)\n", module) == [
        "line 2: Sequencer._log"
    ]
    assert private_uses("import pyspark_gazette.spark.read.plan\npyspark_gazette.spark.read.plan._x\n", module) == [
        "line 2: pyspark_gazette.spark.read.plan._x"
    ]
    assert private_uses("from pyspark_gazette import _forks\n_forks.install()\n", module) == []
    assert private_uses("from pyspark_gazette.protocol import pb\npb.FragmentsResponse._Fragment\n", module) == []
    assert private_uses("class A:\n    def f(self):\n        return self._x\n", module) == []
