"""Every test hook of the package, in one place (fault injection for the test suite only).

Production code calls these at fixed points. All of them are off unless the process was started
with :data:`HOOKS_ENV` set to ``1`` (read once, when this module is imported): off, each call
returns at once and touches no file, no environment variable and no Spark property, so nothing
outside the process (a file in a shared folder, say) can make a job pause or fail. The test suite
sets the variable for itself and every process it starts (tests/conftest.py). Armed, each hook is
still a no-op unless a test armed it:

* :data:`STREAM_HOLD_ENV` / :func:`stream_hold`: the streaming sink blocks at a phase of a
  micro-batch (tests/unit/test_testing.py, the chaos and cluster tests);
* :data:`FAIL_FIRST_ATTEMPT_ENV` / :func:`fail_first_attempt_after`: the first attempt of write
  partition 0 fails after appending some rows (the retry and exactly-once tests);
* ``--test-hold-dir`` (:func:`add_broker_arguments`) / :func:`hold_rpc`: the broker parks a Read
  or Append RPC after its first content until it stops (tests/spark/test_faults_broker.py);
* :func:`arm_settle_wait` / :func:`settle_waiting`: a marker file written when planning starts
  waiting out a hole of a journal's listing (client/settle.py; tests/spark/test_read_holes.py);
* :func:`arm_hold` / :func:`rpc_hold` (kinds :data:`HOLD_KINDS`): an RPC of a journal pauses
  at a fixed point until the test releases it, and a marker names the process, the broker and
  the offsets (the failover tests kill brokers or etcd exactly then): ``read``, an executor's
  broker Read after its first content (:func:`arm_read_hold` / :func:`read_hold`); ``heads``,
  stream planning's write-head Read, addressed and not yet sent; ``append``, an Append whose
  content gRPC has taken, before its commit; ``commit``, a write's commit on the driver.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
import threading
from typing import Any

log = logging.getLogger(__name__)

#: ``1`` in a process's environment when it imports the package arms the hooks below; anything
#: else (the default: unset) leaves every hook a no-op for the life of the process.
HOOKS_ENV = "PYSPARK_GAZETTE_TESTING_HOOKS"
#: Whether this process's hooks are armed (:data:`HOOKS_ENV`, read once, at import).
ENABLED = os.environ.get(HOOKS_ENV) == "1"

#: ``<phase>:<batch>:<dir>`` touches ``<dir>/<phase>-<batch>`` and then blocks forever when the
#: sink reaches ``phase`` (``task-start`` / ``task-end`` in partition 0's task, ``commit-start`` /
#: ``commit-end`` on the driver) of micro-batch ``batch``.
STREAM_HOLD_ENV = "PYSPARK_GAZETTE_TESTING_STREAM_HOLD"
#: The first attempt of partition 0 fails once it has appended this many rows.
FAIL_FIRST_ATTEMPT_ENV = "PYSPARK_GAZETTE_TESTING_FAIL_FIRST_ATTEMPT_AFTER_ROWS"


def fail_first_attempt_after(partition: int, attempt: int) -> int:
    """Rows after which this task attempt fails (0: never), from :data:`FAIL_FIRST_ATTEMPT_ENV`."""
    if not ENABLED:
        return 0
    return int(os.environ.get(FAIL_FIRST_ATTEMPT_ENV) or 0) if partition == 0 and attempt == 0 else 0


def stream_hold(phase: str, batch: int, ctx: Any = None) -> None:
    """The :data:`STREAM_HOLD_ENV` hook (a no-op unless it names this point).

    The point ``phase:batch:folder`` comes from the variable, or in tasks from the Spark local
    property of the same name (cluster tests set it for one query, as executors outlive it).
    The first process to reach the point writes its PID to ``folder/phase-batch`` and blocks
    until the test kills it; later ones (a retry on another executor) go on.
    """
    if not ENABLED:
        return
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
    if not ENABLED or core.hold_dir is None or not os.path.exists(os.path.join(core.hold_dir, "armed")):
        return
    fd, _ = tempfile.mkstemp(prefix=f"{what}-", dir=core.hold_dir)
    os.write(fd, journal.encode())
    os.close(fd)
    log.warning("holding a %s of %r (fault injection)", what, journal)
    with core.changed:
        while not core.stopping:
            core.changed.wait(1.0)


#: Folder of the settle and read-hold hooks' files (a fixed place: planning and reads run in
#: Spark's Python workers, which neither share the test's memory nor see environment variables set
#: after Spark started; the cluster tier's workers have a TMPDIR of their own, so not gettempdir()).
#: ``PYSPARK_GAZETTE_TESTING_DIR``, when set before Spark starts, moves it: parallel test processes
#: (pytest-xdist workers) each get their own, so hooks armed in one never fire in the other.
SETTLE_DIR = os.environ.get("PYSPARK_GAZETTE_TESTING_DIR") or os.path.join(
    "/tmp" if not ENABLED or os.path.isdir("/tmp") else tempfile.gettempdir(), "pyspark-gazette-testing-settle"
)


def _require_enabled(what: str) -> None:
    """Arming a hook in a process whose hooks are off would silently do nothing: say so."""
    if not ENABLED:
        raise RuntimeError(
            f"{what}: the test hooks are off in this process; set {HOOKS_ENV}=1 in its environment "
            "before pyspark_gazette is imported (and in the processes it starts)"
        )


def _settle_name(journal: str) -> str:
    return journal.replace("/", "%2F")


def arm_settle_wait(journal: str) -> str:
    """Arm :func:`settle_waiting` for ``journal``: returns the path of the marker file it will
    create when planning starts waiting on a hole of that journal."""
    _require_enabled("arm_settle_wait")
    os.makedirs(SETTLE_DIR, exist_ok=True)
    armed = os.path.join(SETTLE_DIR, _settle_name(journal) + ".armed")
    open(armed, "w").close()
    marker = os.path.join(SETTLE_DIR, _settle_name(journal) + ".waiting")
    if os.path.exists(marker):
        os.unlink(marker)
    return marker


def disarm_settle_wait(journal: str) -> None:
    for suffix in (".armed", ".waiting"):
        try:
            os.unlink(os.path.join(SETTLE_DIR, _settle_name(journal) + suffix))
        except FileNotFoundError:
            pass


def settle_waiting(journal: str, holes: list[tuple[int, int]]) -> None:
    """Called by client/settle.py as planning starts waiting on ``holes`` of ``journal``: writes
    the marker (the PID and the holes) when :func:`arm_settle_wait` armed the journal."""
    if not ENABLED:
        return
    base = os.path.join(SETTLE_DIR, _settle_name(journal))
    if not os.path.exists(base + ".armed"):
        return
    from pyspark_gazette.errors import offset_ranges

    log.warning("planning waits on offsets %s of %r (test hook)", offset_ranges(holes), journal)
    draft = f"{base}.{os.getpid()}.draft"
    with open(draft, "w") as f:
        f.write(f"{os.getpid()} {offset_ranges(holes)}")
    os.replace(draft, base + ".waiting")


def _hold_base(kind: str, journal: str) -> str:
    return os.path.join(SETTLE_DIR, _settle_name(journal) + "." + kind)


def arm_hold(kind: str, journal: str) -> tuple[str, str]:
    """Arm :func:`rpc_hold` of ``kind`` (:data:`HOLD_KINDS`) for ``journal``: returns (the marker
    the held caller writes, the file whose creation releases it)."""
    if kind not in HOLD_KINDS:
        raise ValueError(f"hold kind {kind!r}: expected one of {', '.join(HOLD_KINDS)}")
    _require_enabled("arm_hold")
    os.makedirs(SETTLE_DIR, exist_ok=True)
    base = _hold_base(kind, journal)
    for suffix in ("-held", "-release"):
        if os.path.exists(base + suffix):
            os.unlink(base + suffix)
    open(base + "-armed", "w").close()
    return base + "-held", base + "-release"


def release_hold(kind: str, journal: str) -> None:
    open(_hold_base(kind, journal) + "-release", "w").close()


def disarm_hold(kind: str, journal: str) -> None:
    base = _hold_base(kind, journal)
    for suffix in ("-armed", "-held", "-release"):
        try:
            os.unlink(base + suffix)
        except FileNotFoundError:
            pass


#: Where :func:`rpc_hold` is called: ``read`` (an executor's broker Read after its first content,
#: its RPC open: spark/read/segments.py), ``heads`` (stream planning's write-head sweep, its Read
#: addressed to a broker and not yet sent: client/heads.py) and ``append`` (an Append with all
#: its content handed to gRPC and its commit chunk not yet sent, its RPC open: client/appender.py)
#: and ``commit`` (a write's commit on the driver, its tasks done, before its client's first call:
#: the transactional write's acknowledgements and the sink's check, spark/write/).
HOLD_KINDS = ("read", "heads", "append", "commit")


def hold_armed(kind: str, journal: str) -> bool:
    if not ENABLED:
        return False
    return os.path.exists(_hold_base(kind, journal) + "-armed")


def armed_journals(kind: str) -> frozenset[str]:
    """The journals a ``kind`` hold is armed for (one directory listing: for callers that would
    otherwise look once per journal, such as a sweep over thousands)."""
    if not ENABLED:
        return frozenset()
    try:
        names = os.listdir(SETTLE_DIR)
    except FileNotFoundError:
        return frozenset()
    tail = f".{kind}-armed"
    return frozenset(n[: -len(tail)].replace("%2F", "/") for n in names if n.endswith(tail))


def rpc_hold(kind: str, journal: str, endpoint: str, *detail: int) -> None:
    """Called at the ``kind`` point of an RPC of ``journal`` to ``endpoint``. When armed
    (:func:`arm_hold`), the first caller to get here writes the marker (PID, ``detail``,
    endpoint) and waits for the release file (or the disarming, at most 10 minutes); others
    go on."""
    if not ENABLED:
        return
    base = _hold_base(kind, journal)
    if not os.path.exists(base + "-armed"):
        return
    draft = f"{base}.{os.getpid()}.{threading.get_ident()}.draft"
    with open(draft, "w") as f:
        f.write(" ".join([str(os.getpid()), *(str(d) for d in detail), endpoint]))
    try:
        os.link(draft, base + "-held")  # once: later callers go on
    except FileExistsError:
        return
    finally:
        os.unlink(draft)
    log.warning("holding a %s RPC of %r to %s (test hook)", kind, journal, endpoint)
    import time

    deadline = time.monotonic() + 600
    while not os.path.exists(base + "-release") and os.path.exists(base + "-armed") and time.monotonic() < deadline:
        time.sleep(0.05)


def arm_read_hold(journal: str) -> tuple[str, str]:
    """:func:`arm_hold` of :func:`read_hold`."""
    return arm_hold("read", journal)


def release_read_hold(journal: str) -> None:
    release_hold("read", journal)


def disarm_read_hold(journal: str) -> None:
    disarm_hold("read", journal)


def read_hold(journal: str, offset: int, end: int, endpoint: str) -> None:
    """Called by an executor's broker read of ``journal`` after its first content (now at
    ``offset`` of a segment ending at ``end``, its Read RPC open on ``endpoint``): the ``read``
    :func:`rpc_hold`, whose marker reads ``PID offset end endpoint``."""
    rpc_hold("read", journal, endpoint, offset, end)
