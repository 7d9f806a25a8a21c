"""Group commit: one thread makes committed appends durable, many at a time.

Appenders hand a spool's commit record to :meth:`Syncer.submit` and then wait in
:meth:`Syncer.wait`. The syncer thread takes every spool with pending records, syncs its
content file once and writes all its records with one log sync. Appends that arrive while a
sync is running are batched into the next one, so the number of syncs per second stays bounded
by the disk, not by the number of appends, and a sync never happens per content chunk.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from pyspark_gazette.broker.fragment.spool import CommitRecord, Spool
from pyspark_gazette.broker.worker import Worker

log = logging.getLogger(__name__)


class Syncer(Worker):
    def __init__(self, on_durable: Callable[[Spool, CommitRecord], None]):
        super().__init__("gazette-syncer")
        self._on_durable = on_durable
        self._dirty: dict[int, Spool] = {}
        self._thread.start()

    def submit(self, spool: Spool, record: CommitRecord) -> None:
        with self._cond:
            spool.pending.append(record)
            self._dirty[id(spool)] = spool
            self._cond.notify_all()

    def wait(self, spool: Spool, end: int) -> None:
        """Block until ``spool`` is durable through ``end``; raise if syncing it failed."""
        with self._cond:
            while spool.durable.end < end and spool.failed is None:
                self._cond.wait()
            if spool.failed is not None and spool.durable.end < end:
                raise OSError(f"syncing spool {spool.data_path} failed") from spool.failed

    def flush(self, spool: Spool) -> None:
        """Block until everything committed to ``spool`` is durable (append lock holder only:
        its sequenced end is then the end of the last committed append, whose record may be
        pending or already taken by a sync in progress)."""
        self.wait(spool, spool.seq_end)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._dirty and not self._stopping:
                    self._cond.wait()
                if not self._dirty and self._stopping:
                    return
                batch = []
                for spool in self._dirty.values():
                    batch.append((spool, spool.pending))
                    spool.pending = []
                self._dirty.clear()
            for spool, records in batch:
                try:
                    spool.sync(records)
                except BaseException as e:  # a failed fsync is not retried: the spool is dead
                    log.error("syncing spool %s failed: %s", spool.data_path, e)
                    with self._cond:
                        spool.failed = e
                        self._cond.notify_all()
                    continue
                with self._cond:
                    spool.durable = records[-1]
                    self._cond.notify_all()
                self._on_durable(spool, records[-1])
