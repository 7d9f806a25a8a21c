"""A built C extension that does not load (another glibc, another CPython ABI) leaves the package
working on its Python engines, with one log line saying so; an extension that is simply not there
(the pure wheel) is silent."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pyspark_gazette

PACKAGE = pathlib.Path(pyspark_gazette.__file__).parent


def _package_copy(tmp_path: pathlib.Path, so_bytes: bytes | None) -> pathlib.Path:
    dest = tmp_path / "pyspark_gazette"
    shutil.copytree(PACKAGE, dest, ignore=shutil.ignore_patterns("*.so", "__pycache__"))
    if so_bytes is not None:
        (dest / "_jsonscan.abi3.so").write_bytes(so_bytes)
    return tmp_path


def _run(path: pathlib.Path, code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, str(path)],
        env={"PYTHONPATH": str(path), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# In the child: the engine and the load error, after importing the modules that use the extension.
CHECK = """
import logging, sys
logging.basicConfig(stream=sys.stderr, format="%(levelname)s %(name)s %(message)s")
from pyspark_gazette import native
from pyspark_gazette.spark.read import typed
from pyspark_gazette.spark.write import encode
assert native.__file__.startswith(sys.argv[1]), native.__file__
print(native.engine(), native.LOAD_ERROR or "-")
"""


def test_an_extension_that_does_not_load_falls_back_with_one_log_line(tmp_path):
    root = _package_copy(tmp_path, b"not an ELF file: a wheel built for another platform")
    done = _run(root, CHECK)
    assert done.returncode == 0, done.stderr
    engine, _, error = done.stdout.strip().partition(" ")
    assert engine == "pure"
    assert "ImportError" in error
    warnings = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(warnings) == 1, done.stderr
    assert warnings[0].startswith("WARNING pyspark_gazette.native ")
    assert "did not load" in warnings[0] and "Python engines" in warnings[0]


def test_no_extension_at_all_is_the_pure_engine_silently(tmp_path):
    root = _package_copy(tmp_path, None)
    done = _run(root, CHECK)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["pure", "-"]
    assert done.stderr.strip() == ""
