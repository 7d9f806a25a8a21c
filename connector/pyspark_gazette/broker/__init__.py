"""The embedded Gazette-compatible broker (server side only; never imports pyspark).

:class:`EmbeddedBroker` runs it in-process; ``python -m pyspark_gazette.broker`` (or
:func:`broker_main`) runs it as a process.
"""

from __future__ import annotations

from pyspark_gazette.broker.embedded import EmbeddedBroker
from pyspark_gazette.broker.main import broker_main

__all__ = ["EmbeddedBroker", "broker_main"]
