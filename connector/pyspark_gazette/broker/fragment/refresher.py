"""Refreshing fragment indexes from the stores, and rolling idle spools.

:class:`Refresher` re-lists every journal's stores each ``refresh_interval`` (and at once when
a journal is created or its spec changes), so fragments written by other processes are served
and fragments removed from a store stop being offered. A failed listing is logged and keeps the
previous index. It also rolls spools whose ``flush_interval`` boundary passed while the journal
was idle (Gazette's brokers do this with a periodic zero-byte append).
"""

from __future__ import annotations

import logging
import time

from pyspark_gazette.broker.fragment.stores import Stores
from pyspark_gazette.broker.journal import Journal
from pyspark_gazette.broker.worker import Worker
from pyspark_gazette.errors import redact_url
from pyspark_gazette.fragments import FragmentRef
from pyspark_gazette.protocol.durations import duration_seconds

log = logging.getLogger(__name__)


class Refresher(Worker):
    """Lists each journal's stores every refresh_interval (and at once when asked)."""

    def __init__(self, stores: Stores):
        super().__init__("gazette-refresher")
        self._stores = stores
        self._due: dict[str, float] = {}  # journal name -> monotonic due time
        self._journals: dict[str, Journal] = {}
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
                self._stores.record(url, e, "list")
                log.warning("listing %s in %s failed: %s", journal.name, redact_url(url), redact_url(str(e)))
                continue
            self._stores.record(url, None, "list")
        if not failed or not journal.listed.is_set():
            # A failed listing keeps the previous index, except the very first one, which must
            # not hold appends back forever.
            journal.install_listing(listed, started)
        if journal.flush_interval_deadline() is not None:
            journal.roll_idle(time.time())
