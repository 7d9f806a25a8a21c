"""pyspark-gazette: Spark-native connector for Gazette journals.

Importing this package is cheap: the Spark data source (:class:`DefaultSource`, short name
``gazette``) is loaded on first access, so Spark's automatic discovery of ``pyspark_*``
modules finds it without a ``spark.dataSource.register`` call, and processes that only use the
client or the embedded broker never import pyspark.
"""

from __future__ import annotations

from typing import Any

from pyspark_gazette import _forks  # noqa: F401  (first, before anything imports gRPC: see there)
from pyspark_gazette.errors import GazetteError

__version__ = "0.1.0.dev0"

__all__ = ["DefaultSource", "GazetteDataSource", "GazetteError", "__version__"]


def __getattr__(name: str) -> Any:
    if name in ("DefaultSource", "GazetteDataSource"):
        from pyspark_gazette.spark.source import GazetteDataSource

        return GazetteDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
