"""Every test hook of the package, in one place (fault injection for the test suite only).

Production code calls these at fixed points; each is a no-op unless a test armed it:

* :data:`STREAM_HOLD_ENV` / :func:`stream_hold`: the streaming sink blocks at a phase of a
  micro-batch (tests/unit/test_testing.py, the chaos and cluster tests);
* :data:`FAIL_FIRST_ATTEMPT_ENV` / :func:`fail_first_attempt_after`: the first attempt of write
  partition 0 fails after appending some rows (the retry and exactly-once tests);
* ``--test-hold-dir`` (:func:`add_broker_arguments`) / :func:`hold_rpc`: the broker parks a Read
  or Append RPC after its first content until it stops (tests/spark/test_faults_broker.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import threading
from typing import Any

log = logging.getLogger(__name__)

#: ``<phase>:<batch>:<dir>`` touches ``<dir>/<phase>-<batch>`` and then blocks forever when the
#: sink reaches ``phase`` (``task-start`` / ``task-end`` in partition 0's task, ``commit-start`` /
#: ``commit-end`` on the driver) of micro-batch ``batch``.
STREAM_HOLD_ENV = "PYSPARK_GAZETTE_TESTING_STREAM_HOLD"
#: The first attempt of partition 0 fails once it has appended this many rows.
FAIL_FIRST_ATTEMPT_ENV = "PYSPARK_GAZETTE_TESTING_FAIL_FIRST_ATTEMPT_AFTER_ROWS"


def fail_first_attempt_after(partition: int, attempt: int) -> int:
    """Rows after which this task attempt fails (0: never), from :data:`FAIL_FIRST_ATTEMPT_ENV`."""
    return int(os.environ.get(FAIL_FIRST_ATTEMPT_ENV) or 0) if partition == 0 and attempt == 0 else 0


def stream_hold(phase: str, batch: int, ctx: Any = None) -> None:
    """The :data:`STREAM_HOLD_ENV` hook (a no-op unless it names this point).

    The point ``phase:batch:folder`` comes from the variable, or in tasks from the Spark local
    property of the same name (cluster tests set it for one query, as executors outlive it).
    The first process to reach the point writes its PID to ``folder/phase-batch`` and blocks
    until the test kills it; later ones (a retry on another executor) go on.
    """
    spec = os.environ.get(STREAM_HOLD_ENV) or (ctx.getLocalProperty(STREAM_HOLD_ENV) if ctx is not None else None)
    if not spec:
        return
    want_phase, want_batch, folder = spec.split(":", 2)
    if want_phase != phase or int(want_batch) != batch:
        return
    marker, draft = os.path.join(folder, f"{phase}-{batch}"), os.path.join(folder, f".{phase}-{batch}.{os.getpid()}")
    with open(draft, "w") as f:
        f.write(str(os.getpid()))
    try:
        os.link(draft, marker)  # appears whole, and only once
    except FileExistsError:
        return
    finally:
        os.unlink(draft)
    threading.Event().wait()  # until the test kills the process


def add_broker_arguments(parser: argparse.ArgumentParser) -> None:
    """The broker's hidden test flags (``--test-hold-dir``)."""
    parser.add_argument("--test-hold-dir", default=None, help=argparse.SUPPRESS)  # fault-injection tests only


def hold_rpc(core: Any, what: str, journal: str) -> None:
    """Park this RPC of ``core`` (a ``BrokerCore``), after its first content, until the broker stops.

    Only with the core's ``hold_dir`` set and a file ``armed`` in it. A marker file ``<what>-*``
    naming the journal announces the hold, so a test knows the RPC is mid-stream and can kill the
    broker at exactly that point (see tests/spark/test_faults_broker.py).
    """
    if core.hold_dir is None or not os.path.exists(os.path.join(core.hold_dir, "armed")):
        return
    fd, _ = tempfile.mkstemp(prefix=f"{what}-", dir=core.hold_dir)
    os.write(fd, journal.encode())
    os.close(fd)
    log.warning("holding a %s of %r (fault injection)", what, journal)
    with core.changed:
        while not core.stopping:
            core.changed.wait(1.0)
