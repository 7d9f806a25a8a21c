"""The optional C accelerator of typed JSON reads (connector/pyspark_gazette/_native/jsonscan.c).

Everything else is declared in pyproject.toml. ``optional=True``: where the extension cannot be
built (no C compiler), the install goes on without it and typed reads use the pure-Python path
(``pyspark_gazette.spark.read.typed``), which stays the reference for every rule.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "pyspark_gazette._jsonscan",
            ["connector/pyspark_gazette/_native/jsonscan.c"],
            optional=True,
        )
    ]
)
