"""The optional C extension ``pyspark_gazette._jsonscan`` (sources in connector/pyspark_gazette/_native/:
scan.c, the scanner of typed JSON reads; join.c, the row joiner of JSON writes; module.c; common.h).

Everything else is declared in pyproject.toml. ``optional=True``: where the extension cannot be
built (no C compiler), the install goes on without it and typed reads use the pure-Python path
(``pyspark_gazette.spark.read.typed``), which stays the reference for every rule.

A wheel with the extension is tied to the Python version and platform it was built on;
``PYSPARK_GAZETTE_NATIVE_BUILD=0`` builds without it (a ``py3-none-any`` wheel that installs
anywhere, e.g. on Databricks).

No warning flags here: a newer compiler's new warning must never fail an install. ``make
native-strict`` compiles the sources with warnings as errors.
"""

import os

from setuptools import Extension, setup

NATIVE_DIR = "connector/pyspark_gazette/_native"
NATIVE = os.environ.get("PYSPARK_GAZETTE_NATIVE_BUILD", "1") != "0"

setup(
    ext_modules=[
        Extension(
            "pyspark_gazette._jsonscan",
            [f"{NATIVE_DIR}/{name}" for name in ("module.c", "scan.c", "join.c")],
            depends=[f"{NATIVE_DIR}/common.h"],
            optional=True,
        )
    ]
    if NATIVE
    else []
)
