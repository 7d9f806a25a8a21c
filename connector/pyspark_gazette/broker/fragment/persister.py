"""Persisting rolled spools to fragment stores, in the background.

:class:`Persister` compresses each rolled spool with its codec and uploads it to the journal's
``stores[0]`` under its content-addressed name and path postfix, then swaps the local spool
for the persisted fragment in the journal's index and deletes the spool files.

Retries: every failure (store errors, a missing directory, compression errors) is retried,
forever, after 0.1, 0.5, 1, 2 and then every 5 seconds. Each failure is logged as a warning
(URLs redacted) and recorded as the store's health, which FragmentStoreHealth reports until an
upload succeeds. Meanwhile the spool stays on local disk and is served from there. A journal
without stores keeps its fragments local; a deleted journal's pending spools are dropped.
"""

from __future__ import annotations

import heapq
import io
import logging
import os
import time
from datetime import datetime, timezone

from pyspark_gazette.broker.fragment.spool import Spool
from pyspark_gazette.broker.fragment.stores import Stores
from pyspark_gazette.broker.journal import Journal
from pyspark_gazette.broker.worker import Worker
from pyspark_gazette.errors import redact_url
from pyspark_gazette.fragments import Compressor, FragmentRef, FragmentStore
from pyspark_gazette.protocol import pb, postfix

log = logging.getLogger(__name__)

RETRY_BACKOFF = (0.1, 0.5, 1.0, 2.0, 5.0)


class Persister(Worker):
    def __init__(self, stores: Stores):
        super().__init__("gazette-persister")
        self._stores = stores
        self._queue: list[tuple[float, int, Journal, Spool, int]] = []  # (due, seq, journal, spool, attempt)
        self._seq = 0
        self._busy = 0
        self._thread.start()

    def enqueue(self, journal: Journal, spool: Spool, attempt: int = 0, delay: float = 0.0) -> None:
        with self._cond:
            self._seq += 1
            heapq.heappush(self._queue, (time.monotonic() + delay, self._seq, journal, spool, attempt))
            self._cond.notify_all()

    def drain(self, timeout: float) -> bool:
        """Wait until nothing is queued or in flight (retries are forced due now)."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._queue = [(0.0, *rest) for _, *rest in self._queue]  # type: ignore[misc]
            heapq.heapify(self._queue)
            self._cond.notify_all()
            while self._queue or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
        return True

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    if self._queue:
                        wait = self._queue[0][0] - time.monotonic()
                        if wait <= 0:
                            break
                        self._cond.wait(wait)
                    else:
                        self._cond.wait()
                if self._stopping:
                    return
                _, _, journal, spool, attempt = heapq.heappop(self._queue)
                self._busy += 1
            try:
                self._persist_one(journal, spool, attempt)
            finally:
                with self._cond:
                    self._busy -= 1
                    self._cond.notify_all()

    def _persist_one(self, journal: Journal, spool: Spool, attempt: int) -> None:
        if journal.closed or not os.path.exists(spool.data_path):
            return
        stores = list(journal.spec.fragment.stores)
        if not stores:
            return  # no stores: the fragment stays local
        url = stores[0]
        try:
            ref = persist_spool(self._stores.get(url), url, journal.spec, spool)
        except Exception as e:
            self._stores.record(url, e)
            delay = RETRY_BACKOFF[min(attempt, len(RETRY_BACKOFF) - 1)]
            log.warning(
                "persisting %s [%d, %d) to %s failed (attempt %d, retry in %gs): %s",
                journal.name,
                spool.begin,
                spool.end,
                redact_url(url),
                attempt + 1,
                delay,
                redact_url(str(e)),
            )
            self.enqueue(journal, spool, attempt + 1, delay)
            return
        self._stores.record(url, None)
        journal.on_persisted(spool, ref)
        log.debug("persisted %s", ref.describe())


def persist_spool(store: FragmentStore, url: str, spec: pb.JournalSpec, spool: Spool) -> FragmentRef:
    """Compress ``spool`` with its codec and upload it; returns the persisted ref (with mod_time)."""
    first = datetime.fromtimestamp(spool.first_append_time or time.time(), timezone.utc)
    values = postfix.SpoolValues(journal=spool.journal, begin=spool.begin, end=spool.end, first_append_time=first)
    path_postfix = postfix.evaluate(spec.fragment.path_postfix_template, values)
    ref = FragmentRef(
        journal=spool.journal,
        begin=spool.begin,
        end=spool.end,
        sum=spool.sum_hex(),
        codec=spool.codec,
        backing_store=url,
        path_postfix=path_postfix,
    )
    if spool.codec == pb.NONE:
        # A rolled spool file holds exactly [begin, end): upload it as it is.
        mod_time = store.put(ref, spool.data_path)
    else:
        with _CompressingReader(spool.data_path, spool.end - spool.begin, spool.codec) as src:
            mod_time = store.put(ref, src)  # type: ignore[arg-type]  # a readable file object
    return FragmentRef(ref.journal, ref.begin, ref.end, ref.sum, ref.codec, url, int(mod_time), path_postfix)


class _Sink:
    """Where the compressor writes: a growing buffer the reader drains."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def write(self, data) -> int:
        self.buf += data
        return len(data)

    def flush(self) -> None:
        pass


class _CompressingReader(io.RawIOBase):
    """The compressed bytes of the first ``size`` bytes of a file, produced as they are read.

    The store upload pulls from it, so a fragment is compressed straight into the store with no
    temporary file (one write of the compressed bytes instead of two).
    """

    BLOCK = 1 << 20

    def __init__(self, path: str, size: int, codec: int):
        self._src = open(path, "rb")  # noqa: SIM115 - closed in close()
        self._path = path
        self._left = size
        self._sink = _Sink()
        self._comp = Compressor(codec, self._sink)  # type: ignore[arg-type]  # only .write is used
        self._done = False

    def readable(self) -> bool:
        return True

    def _fill(self, want: int) -> None:
        while not self._done and (want < 0 or len(self._sink.buf) < want):
            if self._left:
                block = self._src.read(min(self.BLOCK, self._left))
                if not block:
                    raise OSError(f"spool {self._path} ended {self._left} bytes early")
                self._left -= len(block)
                self._comp.write(block)
            else:
                self._comp.close()
                self._done = True

    def read(self, size: int | None = -1) -> bytes:
        want = -1 if size is None or size < 0 else size
        self._fill(want)
        buf = self._sink.buf
        n = len(buf) if want < 0 else min(want, len(buf))
        out = bytes(buf[:n])
        del buf[:n]
        return out

    def readinto(self, b) -> int:
        data = self.read(len(b))
        b[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._src.close()
        super().close()
