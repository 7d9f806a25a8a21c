"""The optional C extension ``pyspark_gazette._jsonscan`` (setup.py; source in ``_native/``).

It holds the JSON scanner of typed reads (:mod:`pyspark_gazette.spark.read.typed`) and the row
joiner of JSON writes (:mod:`pyspark_gazette.spark.write.encode`). Where it is not built (no C
compiler, ``PYSPARK_GAZETTE_NATIVE_BUILD=0``), or :data:`NATIVE_ENV` is ``0`` in a process's
environment, both take their pure-Python paths, which give the same results.
"""

from __future__ import annotations

import os
from types import ModuleType

try:
    from pyspark_gazette import _jsonscan as module
except ImportError:  # pragma: no cover - installs without a C compiler
    module = None  # type: ignore[assignment]

#: Set to ``0`` to turn the C extension off (benchmarks' same-run A/B, tests).
NATIVE_ENV = "PYSPARK_GAZETTE_NATIVE_JSON"


def extension() -> ModuleType | None:
    """The extension module, or ``None`` when it is not built or turned off by :data:`NATIVE_ENV`."""
    return module if module is not None and os.environ.get(NATIVE_ENV, "1") != "0" else None
