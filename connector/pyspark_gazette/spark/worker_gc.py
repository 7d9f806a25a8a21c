"""A cost Spark's reused Python workers pay after every task, and how the connector avoids it.

pyspark's daemon (``pyspark/daemon.py``) forks the Python workers and, when it reuses them
(``spark.python.worker.reuse``, on by default), runs a full ``gc.collect()`` in the worker after
every task. A full collection visits every object the cyclic collector tracks, and in a worker
that has imported the connector that is mostly what the imports left behind: pyspark, pyarrow,
gRPC, the protobuf descriptors and our modules, about 90,000 objects, of which pyspark's own are
under half. Measured on 2 cores (docs/benchmarks.md, "Spark's collection after every task"):
60-70 ms per task, and a typed read of 50 MB in three partitions ran five such collections
(three read tasks, the planning worker, the worker that creates the source): about a third of
the Python workers' CPU time for the query.

:func:`settle` moves the objects alive when Spark enters the connector in such a worker into
the collector's permanent generation (``gc.freeze()``, constant time), so the collection after
each task skips them. It does so at the first two entries of a process (the second one catches
what the first task imported lazily, after the daemon collected that task's garbage) and never
again, so objects of later tasks are collected as usual, and whatever the first two tasks'
own inputs left in reference cycles is kept once, not once per task. Outside a reused worker of
pyspark's daemon (a driver, a test, a worker started without the daemon) it does nothing.

``PYSPARK_GAZETTE_FREEZE_IMPORTS=0`` in the workers' environment turns it off (the benchmark
measures the read both ways in one Spark session).
"""

from __future__ import annotations

import gc
import os
import sys

#: Set to ``0`` in the Python workers' environment to leave the collector alone.
FREEZE_ENV = "PYSPARK_GAZETTE_FREEZE_IMPORTS"
#: Entries of a process that freeze what is alive (see the module docstring).
FREEZES = 2

_pid = 0
_entries = 0


def _in_reused_daemon_worker() -> bool:
    """True in a worker process forked by pyspark's daemon with reuse on (it reads the same
    variable: ``reuse = os.environ.get("SPARK_REUSE_WORKER")``)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    return (
        getattr(spec, "name", None) == "pyspark.daemon"
        and bool(os.environ.get("SPARK_REUSE_WORKER"))
        and os.environ.get(FREEZE_ENV, "1") != "0"
    )


def settle() -> None:
    """Called on every entry from Spark: freezes what is alive at a reused worker's first
    :data:`FREEZES` entries (a dictionary lookup and a comparison after that)."""
    global _pid, _entries
    pid = os.getpid()
    if pid != _pid:  # a new process (forked workers inherit this module's state)
        _pid, _entries = pid, 0
    if _entries >= FREEZES:
        return
    _entries += 1
    if _in_reused_daemon_worker():
        gc.freeze()
