"""The driver's read-committed state scan of the next micro-batch, done while this one runs.

A read-committed stream's ``latestOffset`` puts the sequencer's state at each journal's new end
into the offset (:func:`~pyspark_gazette.spark.read.committed.scan_state`): it reads the batch's
bytes once on the driver before any task starts, so each batch waits for one extra read of its
own bytes (docs/benchmarks.md, "Read-committed micro-batches"). But once a batch's end ``E`` is
fixed, the next batch starts at ``E``, and when the journal already holds more, most of the next
scan can be done while Spark runs this batch's tasks, in the driver's Python process that is
otherwise waiting (Spark keeps one process per stream reader for the query's life).

:class:`ScanAhead` does that in a thread: from the entry of ``E`` it reads up to ``until`` (the
next batch's likely end: as many bytes as this batch, within the snapshot's write head),
keeping the producers' states at up to :data:`POINTS` places on the way (each a copy of every
producer's state, so memory does not grow with the batch). The next ``latestOffset`` continues
from the last of them at or before its end, reading only what is left, and takes the usual
full scan when the start is not the one scanned from, or the scan failed or stalled. The states are the
same either way: :func:`~pyspark_gazette.spark.read.committed.advance` moves them over the
journal's messages in order, and a piece boundary is a point in that order (unit-tested
against the full scan, tests/unit/test_scan_ahead.py).

What it costs: the thread reads at most one batch's bytes that no batch may need (a stream
stopped before its next batch), and a batch whose end falls before the scan's end waits for
the piece in progress.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator

from pyspark_gazette.message import Framing
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.committed import (
    SpanState,
    advance_messages,
    copy_states,
    entry,
    offset_of,
    pruned_states,
    restored_states,
    state_of,
)
from pyspark_gazette.spark.read.segments import Messages

log = logging.getLogger(__name__)

#: Threads running scans ahead in a driver process, whatever the number of journals: a scan that
#: has not started when its batch is planned is dropped (that batch scans in full).
SCAN_AHEAD_THREADS = 2
_queue: queue.SimpleQueue = queue.SimpleQueue()
_workers: list[threading.Thread] = []
_workers_lock = threading.Lock()


def _work() -> None:
    while True:
        _queue.get()._run()


def _submit(scan: ScanAhead) -> None:
    with _workers_lock:
        while len(_workers) < SCAN_AHEAD_THREADS:  # daemons: a process never waits for a scan to exit
            worker = threading.Thread(target=_work, name="gazette-scan-ahead", daemon=True)
            worker.start()
            _workers.append(worker)
    _queue.put(scan)


#: States a scan ahead keeps between its start and its end, about evenly spaced (each is a copy
#: of every producer's state): a batch that ends short of the scan resumes from the last one
#: before its end.
POINTS = 16

#: A batch waits for its scan ahead only while that scan reads on: after this many seconds
#: without a piece read, it scans in full itself (with a fresh snapshot, e.g. after a failover).
STALL_SECONDS = 10.0

#: Reads messages beginning in ``[begin, end)``: :func:`~pyspark_gazette.spark.read.committed.state_pieces`
#: over a snapshot, or a test's list.
Pieces = Callable[[int, int], Iterator[Messages]]


def same_start(a, b, journal: str) -> bool:
    """Whether two offset entries are the same point: offset and producers' states."""
    return offset_of(a) == offset_of(b) and state_of(a, journal) == state_of(b, journal)


class ScanAhead:
    """The state scan of ``[offset of origin, until)`` in a thread (see the module docstring).

    ``origin`` must carry state (an entry this stream's ``latestOffset`` returned).
    """

    def __init__(self, journal: str, origin: dict, until: int, pieces: Pieces, framing: Framing, opts: ReadOptions):
        self.journal, self.origin, self.until = journal, origin, until
        self._pieces, self._framing, self._opts = pieces, framing, opts
        #: (X, states after every message beginning before X), X ascending.
        self._points: list[tuple[int, dict[int, SpanState]]] = []
        self._done = False
        self._failed: BaseException | None = None
        self._cancelled = False
        self._progress = 0  # pieces read so far
        self._cond = threading.Condition()
        _submit(self)

    def _run(self) -> None:
        begin = offset_of(self.origin)
        try:
            if self._cancelled:
                return
            states = restored_states(state_of(self.origin, self.journal))
            self._point(begin, states)
            step = max(1, (self.until - begin) // POINTS)
            for msgs in self._pieces(begin, self.until):
                if self._cancelled:
                    return
                advance_messages(states, msgs, self._framing, self._opts)
                with self._cond:
                    self._progress += 1
                    self._cond.notify_all()
                last = msgs.offsets[len(msgs.offsets) - 1].as_py() + 1 if len(msgs.offsets) else begin
                at = min(max(msgs.end, last), self.until)
                if at - self._points[-1][0] >= step:
                    self._point(at, states)
            self._point(self.until, states)
        except BaseException as e:  # the next latestOffset scans in full, and reports any error
            log.debug("journal %r: the read-committed scan ahead from %d failed: %s", self.journal, begin, e)
            self._failed = e
        finally:
            with self._cond:
                self._done = True
                self._cond.notify_all()

    def _point(self, at: int, states: dict[int, SpanState]) -> None:
        with self._cond:
            if not self._points or at > self._points[-1][0]:
                self._points.append((at, copy_states(states)))
            self._cond.notify_all()

    def cancel(self) -> None:
        self._cancelled = True

    def resume(self, origin, end: int, pieces: Pieces) -> dict | None:
        """The entry of ``end`` with the producers' states there, from this scan's states and
        ``pieces`` for what it did not read; ``None`` when the caller must scan in full (another
        start, or the scan had not started, failed or stalled)."""

        def reached() -> bool:  # the states at or before end are final once a point at or past it exists
            return self._done or self._points[-1][0] >= end

        with self._cond:
            started = bool(self._points) or self._done
            if started and same_start(origin, self.origin, self.journal) and end >= offset_of(self.origin):
                while not reached():
                    seen = self._progress
                    self._cond.wait(STALL_SECONDS)
                    if self._progress == seen and not reached():
                        break  # no piece read for a while (a broker gone?): the batch scans itself
                usable = [p for p in self._points if p[0] <= end] if reached() else []
            else:
                usable = []
        self.cancel()
        if self._failed is not None or not usable:
            return None
        at, states = usable[-1]
        states = copy_states(states)
        if at < end:
            for msgs in pieces(at, end):
                advance_messages(states, msgs, self._framing, self._opts)
        return entry(end, pruned_states(states))
