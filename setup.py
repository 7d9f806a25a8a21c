"""The optional C extension ``pyspark_gazette._jsonscan`` (sources in connector/pyspark_gazette/_native/:
scan.c, the scanner of typed JSON reads; join.c, the row joiner of JSON writes; module.c; common.h).

Everything else is declared in pyproject.toml. ``optional=True``: where the extension cannot be
built (no C compiler), the install goes on without it and typed reads use the pure-Python path
(``pyspark_gazette.spark.read.typed``), which stays the reference for every rule.

On CPython 3.11 and later the extension is built against the stable ABI (``Py_LIMITED_API``
3.11): its wheel is tagged ``cp311-abi3-<platform>`` and installs on CPython 3.11, 3.12, 3.13 ...
of that platform. Built on 3.10 (the limited API of 3.10 has no buffer protocol), or on a
free-threaded CPython, the wheel is for that Python only.
``PYSPARK_GAZETTE_NATIVE_BUILD=0`` builds without the extension: a ``py3-none-any`` wheel that
installs anywhere (``make wheels`` builds both into dist/).

No warning flags here: a newer compiler's new warning must never fail an install. ``make
native-strict`` compiles the sources with warnings as errors.
"""

import os
import sys
import sysconfig

from setuptools import Extension, setup

NATIVE_DIR = "connector/pyspark_gazette/_native"
NATIVE = os.environ.get("PYSPARK_GAZETTE_NATIVE_BUILD", "1") != "0"
#: The stable ABI's version the sources keep to (common.h), as Py_LIMITED_API and as a wheel tag.
LIMITED_API = 0x030B0000
ABI3 = (
    sys.implementation.name == "cpython"
    and sys.version_info >= (3, 11)
    and not sysconfig.get_config_var("Py_GIL_DISABLED")
)

setup(
    ext_modules=[
        Extension(
            "pyspark_gazette._jsonscan",
            [f"{NATIVE_DIR}/{name}" for name in ("module.c", "scan.c", "join.c")],
            depends=[f"{NATIVE_DIR}/common.h"],
            optional=True,
            define_macros=[("Py_LIMITED_API", hex(LIMITED_API))] if ABI3 else [],
            py_limited_api=ABI3,
        )
    ]
    if NATIVE
    else [],
    options={"bdist_wheel": {"py_limited_api": "cp311"}} if NATIVE and ABI3 else {},
)
