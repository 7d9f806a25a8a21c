"""Refreshing fragment indexes from the stores, and rolling idle spools.

:class:`Refresher` re-lists every journal's stores each ``refresh_interval`` (and at once when
a journal is created or its spec changes), so fragments written by other processes are served
and fragments removed from a store stop being offered. A failed listing is logged and keeps the
previous index.

It also keeps one timer per journal for its open spool's ``flush_interval`` boundary: when the
boundary passes with no append since, the spool is rolled and handed to the persister (Gazette's
brokers do this with a periodic zero-byte append). That timer is set when a spool receives its
first append, so an idle tail is persisted at its boundary, not at the store's next listing.
A journal without a ``flush_interval`` keeps an idle partial spool open, as Gazette does.
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

#: How soon an idle roll is tried again when an append held the journal at its boundary.
ROLL_RETRY = 0.5


class Refresher(Worker):
    """Lists each journal's stores every refresh_interval (and at once when asked), and rolls
    spools idle past their flush interval boundary."""

    def __init__(self, stores: Stores):
        super().__init__("gazette-refresher")
        self._stores = stores
        self._due: dict[str, float] = {}  # journal name -> monotonic time of its next listing
        self._roll_due: dict[str, float] = {}  # journal name -> unix time of its spool's boundary
        self._journals: dict[str, Journal] = {}
        self._thread.start()

    def watch(self, journal: Journal) -> None:
        """Start (or restart) refreshing ``journal``, with a listing right away."""
        with self._cond:
            self._journals[journal.name] = journal
            self._due[journal.name] = 0.0
            self._cond.notify_all()
        self.schedule_roll(journal)

    def schedule_roll(self, journal: Journal) -> None:
        """Time the roll of ``journal``'s open spool at its flush interval boundary, if it has one."""
        deadline = journal.flush_interval_deadline()
        with self._cond:
            if self._journals.get(journal.name) is not journal:
                return
            if deadline is None:
                self._roll_due.pop(journal.name, None)
            else:
                self._roll_due[journal.name] = deadline
            self._cond.notify_all()

    def forget(self, name: str) -> None:
        with self._cond:
            self._journals.pop(name, None)
            self._due.pop(name, None)
            self._roll_due.pop(name, None)

    def _next_wait(self) -> tuple[list[str], list[str], float | None]:
        """(journals due a listing, journals due a roll, seconds until the next due) (holds _cond)."""
        mono, wall = time.monotonic(), time.time()
        lists = [n for n, t in self._due.items() if t <= mono]
        rolls = [n for n, t in self._roll_due.items() if t <= wall]
        waits = [t - mono for t in self._due.values()] + [t - wall for t in self._roll_due.values()]
        return lists, rolls, min(waits, default=None)

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopping:
                    lists, rolls, wait = self._next_wait()
                    if lists or rolls:
                        break
                    self._cond.wait(wait)
                if self._stopping:
                    return
                to_list = [self._journals[n] for n in lists]
                to_roll = [self._journals[n] for n in rolls]
                for n in lists:
                    self._due[n] = float("inf")
                for n in rolls:
                    del self._roll_due[n]
            for journal in to_roll:
                self._roll(journal)
            for journal in to_list:
                self.refresh(journal)
                interval = max(1.0, duration_seconds(journal.spec.fragment.refresh_interval))
                with self._cond:
                    if journal.name in self._due and self._journals.get(journal.name) is journal:
                        self._due[journal.name] = min(self._due[journal.name], time.monotonic() + interval)

    def _roll(self, journal: Journal) -> None:
        """Roll ``journal``'s spool if idle past its boundary; time the next try or boundary."""
        journal.roll_idle(time.time())
        deadline = journal.flush_interval_deadline()
        if deadline is not None and deadline <= time.time():
            deadline = time.time() + ROLL_RETRY  # an append held the journal: try again shortly
        with self._cond:
            if self._journals.get(journal.name) is not journal or journal.name in self._roll_due:
                return  # forgotten, or a newer spool already set its own timer
            if deadline is not None:
                self._roll_due[journal.name] = deadline
                self._cond.notify_all()

    def refresh(self, journal: Journal) -> None:
        """List the union of the journal's stores into its index now."""
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
