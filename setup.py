"""The optional C accelerator of typed JSON reads (connector/pyspark_gazette/_native/jsonscan.c).

Everything else is declared in pyproject.toml. ``optional=True``: where the extension cannot be
built (no C compiler), the install goes on without it and typed reads use the pure-Python path
(``pyspark_gazette.spark.read.typed``), which stays the reference for every rule.

A wheel with the extension is tied to the Python version and platform it was built on;
``PYSPARK_GAZETTE_NATIVE_BUILD=0`` builds without it (a ``py3-none-any`` wheel that installs
anywhere, e.g. on Databricks).
"""

import os

from setuptools import Extension, setup

NATIVE = os.environ.get("PYSPARK_GAZETTE_NATIVE_BUILD", "1") != "0"

setup(
    ext_modules=[
        Extension(
            "pyspark_gazette._jsonscan",
            ["connector/pyspark_gazette/_native/jsonscan.c"],
            optional=True,
        )
    ]
    if NATIVE
    else []
)
