"""The optional C extension ``pyspark_gazette._jsonscan`` (setup.py; sources in ``_native/``).

It holds the JSON scanner of typed reads (:mod:`pyspark_gazette.spark.read.typed`) and the row
joiner of JSON writes (:mod:`pyspark_gazette.spark.write.encode`). Where it is not built (no C
compiler, ``PYSPARK_GAZETTE_NATIVE_BUILD=0``), or :data:`NATIVE_ENV` is ``0`` in a process's
environment, both take their pure-Python paths, which give the same results.
"""

from __future__ import annotations

import importlib
import logging
import os
from types import ModuleType

#: Why the built extension did not load (a wheel built against another glibc or another CPython
#: ABI, say), or ``None``: it loaded, or is not built at all (the pure wheel). Reads and writes go
#: on with the Python engines either way; ``pyspark-gazette doctor`` reports it.
LOAD_ERROR: str | None = None

try:
    module: ModuleType | None = importlib.import_module("pyspark_gazette._jsonscan")
except ImportError as exc:
    module = None
    if not (isinstance(exc, ModuleNotFoundError) and exc.name == "pyspark_gazette._jsonscan"):
        LOAD_ERROR = f"{type(exc).__name__}: {exc}"
except OSError as exc:  # pragma: no cover - a loader error CPython does not turn into ImportError
    module = None
    LOAD_ERROR = f"{type(exc).__name__}: {exc}"
if LOAD_ERROR is not None:
    logging.getLogger(__name__).warning(
        "pyspark-gazette: the C scanner (pyspark_gazette._jsonscan) is installed but did not load "
        "(%s); using the Python engines, which give the same results, slower",
        LOAD_ERROR,
    )

#: The kinds of the scanner's plan (``K_*`` in _native/common.h), as the Python side's fallback:
#: where the extension is built, :data:`SCAN_KINDS` is its own ``SCAN_KINDS`` (a unit test holds
#: the two equal).
SCAN_KINDS_FALLBACK: dict[str, int] = {
    "string": 0,
    "long": 1,
    "int": 2,
    "short": 3,
    "byte": 4,
    "double": 5,
    "float": 6,
    "bool": 7,
    "timestamp": 8,
    "ntz": 9,
    "date": 10,
    "struct": 11,
    "list": 12,
}
#: The kinds of the joiner's parts (``P_*`` in _native/common.h), likewise.
PART_KINDS_FALLBACK: dict[str, int] = {
    "text": 0,
    "raw": 1,
    "string": 2,
    "int": 3,
    "bool": 4,
    "micros": 5,
    "date": 6,
    "double": 7,
    "decimal": 8,
}
SCAN_KINDS: dict[str, int] = dict(module.SCAN_KINDS) if module is not None else SCAN_KINDS_FALLBACK
PART_KINDS: dict[str, int] = dict(module.PART_KINDS) if module is not None else PART_KINDS_FALLBACK

#: Set to ``0`` to turn the C extension off (benchmarks' same-run A/B, tests).
NATIVE_ENV = "PYSPARK_GAZETTE_NATIVE_JSON"


def extension() -> ModuleType | None:
    """The extension module, or ``None`` when it is not built or turned off by :data:`NATIVE_ENV`."""
    return module if module is not None and os.environ.get(NATIVE_ENV, "1") != "0" else None


def engine() -> str:
    """``"native"`` where typed reads and JSON writes use the C extension, else ``"pure"``."""
    return "native" if extension() is not None else "pure"
