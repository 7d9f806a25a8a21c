"""Background work on fragment stores: persisting rolled spools and refreshing indexes.

:class:`Stores` caches one :class:`~pyspark_gazette.fragments.FragmentStore` per store URL and
remembers the last failure of each, which FragmentStoreHealth reports.

:class:`Persister` compresses each rolled spool with its codec and uploads it to the journal's
``stores[0]`` under its content-addressed name and path postfix. Failures are logged (without
secrets), recorded as the store's health, and retried with a capped backoff; the spool stays
readable from local disk until the upload succeeds.

:class:`Refresher` re-lists every journal's stores each ``refresh_interval`` so fragments
written by other processes are served, and rolls spools whose ``flush_interval`` passed while
the journal was idle.
"""

from __future__ import annotations

import heapq
import logging
import os
import tempfile
import threading
import time
from datetime import datetime, timezone
from typing import Any

from pyspark_gazette.broker import postfix
from pyspark_gazette.broker.journal import Journal
from pyspark_gazette.broker.specs import duration_seconds
from pyspark_gazette.broker.spool import Spool
from pyspark_gazette.errors import redact_url
from pyspark_gazette.fragments import Compressor, FragmentRef, FragmentStore
from pyspark_gazette.protocol import pb

log = logging.getLogger(__name__)

RETRY_BACKOFF = (0.1, 0.5, 1.0, 2.0, 5.0)


class Stores:
    """FragmentStore instances by URL, and the health of each."""

    def __init__(self, file_root: str | None, storage_options: dict[str, Any] | None):
        self._file_root = file_root
        self._storage_options = storage_options
        self._lock = threading.Lock()
        self._stores: dict[str, FragmentStore] = {}
        self._errors: dict[str, str] = {}

    def get(self, url: str) -> FragmentStore:
        with self._lock:
            store = self._stores.get(url)
            if store is None:
                store = FragmentStore(url, file_root=self._file_root, storage_options=self._storage_options)
                self._stores[url] = store
            return store

    def record(self, url: str, error: BaseException | None) -> None:
        with self._lock:
            if error is None:
                self._errors.pop(url, None)
            else:
                self._errors[url] = redact_url(f"{type(error).__name__}: {error}")

    def health(self, url: str) -> str:
        """Empty when healthy, else the text of the last failure (or of a fresh probe)."""
        with self._lock:
            err = self._errors.get(url)
        if err:
            return err
        try:
            return self.get(url).health()
        except Exception as e:  # a broken URL is an unhealthy store
            return redact_url(f"{type(e).__name__}: {e}")


class Persister:
    def __init__(self, stores: Stores, tmp_dir: str):
        self._stores = stores
        self._tmp_dir = tmp_dir
        os.makedirs(tmp_dir, exist_ok=True)
        self._cond = threading.Condition()
        self._queue: list[tuple[float, int, Journal, Spool, int]] = []  # (due, seq, journal, spool, attempt)
        self._seq = 0
        self._busy = 0
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="gazette-persister", daemon=True)
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

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join()

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
            ref = persist_spool(self._stores.get(url), url, journal.spec, spool, self._tmp_dir)
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


def persist_spool(store: FragmentStore, url: str, spec: pb.JournalSpec, spool: Spool, tmp_dir: str) -> FragmentRef:
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
    size = spool.end - spool.begin
    if spool.codec == pb.NONE:
        with open(spool.data_path, "rb") as src:
            mod_time = store.put(ref, _Limited(src, size))
    else:
        fd, tmp = tempfile.mkstemp(dir=tmp_dir, suffix=".partial")
        try:
            with os.fdopen(fd, "wb") as out, open(spool.data_path, "rb") as src:
                comp = Compressor(spool.codec, out)
                left = size
                while left:
                    block = src.read(min(1 << 20, left))
                    if not block:
                        raise OSError(f"spool {spool.data_path} ended {left} bytes early")
                    comp.write(block)
                    left -= len(block)
                comp.close()
            with open(tmp, "rb") as src:
                mod_time = store.put(ref, src)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return FragmentRef(ref.journal, ref.begin, ref.end, ref.sum, ref.codec, url, int(mod_time), path_postfix)


class _Limited:
    """A read-only file view of the first ``size`` bytes (a spool file is exactly that long)."""

    def __init__(self, f, size: int):
        self._f, self._left = f, size

    def read(self, n: int = -1) -> bytes:
        if n < 0 or n > self._left:
            n = self._left
        data = self._f.read(n)
        self._left -= len(data)
        return data

    def readable(self) -> bool:
        return True


class Refresher:
    """Lists each journal's stores every refresh_interval (and at once when asked)."""

    def __init__(self, stores: Stores):
        self._stores = stores
        self._cond = threading.Condition()
        self._due: dict[str, float] = {}  # journal name -> monotonic due time
        self._journals: dict[str, Journal] = {}
        self._stopping = False
        self._thread = threading.Thread(target=self._run, name="gazette-refresher", daemon=True)
        self._thread.start()

    def watch(self, journal: Journal) -> None:
        """Start (or restart) refreshing ``journal``, with a listing right away."""
        with self._cond:
            self._journals[journal.name] = journal
            self._due[journal.name] = 0.0
            self._cond.notify_all()

    def forget(self, name: str) -> None:
        with self._cond:
            self._journals.pop(name, None)
            self._due.pop(name, None)

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    now = time.monotonic()
                    due = [n for n, t in self._due.items() if t <= now]
                    if due:
                        break
                    nxt = min(self._due.values(), default=None)
                    self._cond.wait(None if nxt is None else nxt - now)
                if self._stopping:
                    return
                work = [self._journals[n] for n in due]
                for n in due:
                    self._due[n] = float("inf")
            for journal in work:
                self.refresh(journal)
                interval = max(1.0, duration_seconds(journal.spec.fragment.refresh_interval))
                deadline = journal.flush_interval_deadline()
                if deadline is not None:
                    interval = max(0.5, min(interval, deadline - time.time() + 0.05))
                with self._cond:
                    if journal.name in self._due and self._journals.get(journal.name) is journal:
                        self._due[journal.name] = min(self._due[journal.name], time.monotonic() + interval)

    def refresh(self, journal: Journal) -> None:
        """List the union of the journal's stores into its index now; roll an idle spool."""
        started = time.monotonic()
        listed: list[FragmentRef] = []
        failed = False
        for url in journal.spec.fragment.stores:
            try:
                listed.extend(self._stores.get(url).list(journal.name))
            except Exception as e:
                failed = True
                self._stores.record(url, e)
                log.warning("listing %s in %s failed: %s", journal.name, redact_url(url), redact_url(str(e)))
        if not failed or not journal.listed.is_set():
            # A failed listing keeps the previous index, except the very first one, which must
            # not hold appends back forever.
            journal.install_listing(listed, started)
        if journal.flush_interval_deadline() is not None:
            journal.roll_idle(time.time())
