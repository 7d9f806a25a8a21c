"""The broker's state: spec registry, journals, and the background machinery.

:class:`BrokerCore` is everything but the gRPC surface. It loads journal specs and recovers
each journal's spools from the data directory, starts the syncer (group commit), the persister
and the refresher, applies spec changes, and shuts all of it down in order: roll every
non-empty spool, persist what can be persisted within the grace period, stop the threads.

Data directory layout::

    specs.json                 journal specs, revisions, cluster identity (atomic rewrite)
    journals/<id>/journal      the journal's name
    journals/<id>/<begin>.data spool content
    journals/<id>/<begin>.log  spool commit records
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from typing import Any

from pyspark_gazette.broker.fragment.persister import Persister
from pyspark_gazette.broker.fragment.refresher import Refresher
from pyspark_gazette.broker.fragment.spool import CommitRecord, Spool
from pyspark_gazette.broker.fragment.stores import Stores
from pyspark_gazette.broker.fragment.syncer import Syncer
from pyspark_gazette.broker.headers import HeaderFactory
from pyspark_gazette.broker.journal import Journal, state_dir_name
from pyspark_gazette.broker.specs import SpecRegistry
from pyspark_gazette.protocol import pb

log = logging.getLogger(__name__)

DEFAULT_MIN_APPEND_RATE = 65_536


class BrokerCore:
    def __init__(
        self,
        data_dir: str,
        *,
        suffix: str,
        file_root: str | None = None,
        storage_options: dict[str, Any] | None = None,
        min_append_rate: int = DEFAULT_MIN_APPEND_RATE,
        hold_dir: str | None = None,
    ):
        self.data_dir = os.path.abspath(data_dir)
        self.hold_dir = hold_dir
        self.journals_dir = os.path.join(self.data_dir, "journals")
        os.makedirs(self.journals_dir, exist_ok=True)
        self.file_root = file_root
        self.min_append_rate = min_append_rate
        self.rate_aborts = 0  # appends rolled back for falling below min_append_rate
        self.registry = SpecRegistry(self.data_dir)
        self.headers = HeaderFactory(self.registry.state, suffix)
        self.stores = Stores(file_root, storage_options)
        self.syncer = Syncer(self._on_durable)
        self.persister = Persister(self.stores)
        self.refresher = Refresher(self.stores)
        self.lock = threading.Lock()
        self.changed = threading.Condition()  # notified on every spec revision (List watches)
        self.stopping = False
        self.journals: dict[str, Journal] = {}
        _, entries = self.registry.snapshot()
        wanted = {state_dir_name(e.spec.name) for e in entries}
        for name in os.listdir(self.journals_dir):
            if name not in wanted:  # deleted while the broker was down mid-delete
                shutil.rmtree(os.path.join(self.journals_dir, name), ignore_errors=True)
        for entry in entries:
            journal = self._open_journal(entry)
            for spool in journal.pending_persist():
                self.persister.enqueue(journal, spool)

    # ---------------------------------------------------------------- journals

    def _open_journal(self, entry) -> Journal:
        journal = Journal(
            entry,
            os.path.join(self.journals_dir, state_dir_name(entry.spec.name)),
            self.syncer,
            self._on_rolled,
            self.refresher.schedule_roll,
        )
        self.journals[journal.name] = journal
        self.refresher.watch(journal)
        return journal

    def journal(self, name: str) -> Journal | None:
        journal = self.journals.get(name)
        if journal is None and self.registry.get(name) is not None:
            # Listed (the registry committed an Apply) but not open yet: that Apply still holds
            # the lock while it opens the journal. Wait for it rather than answer
            # JOURNAL_NOT_FOUND for a journal a List already returned.
            with self.lock:
                journal = self.journals.get(name)
        return journal

    def _on_durable(self, spool: Spool, record: CommitRecord) -> None:
        journal = self.journals.get(spool.journal)
        if journal is not None:
            journal.on_durable(spool, record)

    def _on_rolled(self, journal: Journal, spool: Spool) -> None:
        self.persister.enqueue(journal, spool)

    # ---------------------------------------------------------------- specs

    def apply(self, changes: list[pb.ApplyRequest.Change]) -> tuple[bool, int]:
        """Apply validated changes as one transaction; returns (ok, revision)."""
        with self.lock:
            ok, revision, upserted, deleted = self.registry.apply(changes)
            if not ok:
                return False, revision
            for name in upserted:
                entry = self.registry.get(name)
                assert entry is not None
                journal = self.journals.get(name)
                if journal is None:
                    self._open_journal(entry)
                else:
                    journal.update_entry(entry)
                    self.refresher.watch(journal)
                    if entry.spec.fragment.stores:  # stores may have been added: persist what waits
                        for spool in journal.pending_persist():
                            self.persister.enqueue(journal, spool)
            for name in deleted:
                journal = self.journals.pop(name, None)
                if journal is not None:
                    self.refresher.forget(name)
                    journal.destroy()
        self._notify_changed()
        return True, revision

    def set_suspend(self, journal: Journal, level: int, offset: int) -> None:
        """Set a journal's suspension level and resumption offset, as a new revision (an append
        with SUSPEND_IF_FLUSHED / SUSPEND_NOW suspends it, one with SUSPEND_RESUME resumes it at
        level NONE keeping the offset, as Gazette's append FSM updates the spec)."""
        with self.lock:
            spec = pb.JournalSpec()
            spec.CopyFrom(journal.spec)
            spec.suspend.level = level  # type: ignore[assignment]
            spec.suspend.offset = offset
            self.registry.update_spec(spec)
            entry = self.registry.get(spec.name)
            assert entry is not None
            journal.update_entry(entry)
        self._notify_changed()

    def _notify_changed(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def refresh(self, name: str) -> None:
        """List a journal's stores into its index now (synchronously)."""
        journal = self.journals.get(name)
        if journal is not None:
            self.refresher.refresh(journal)

    # ---------------------------------------------------------------- shutdown

    def begin_stop(self) -> None:
        """Wake every blocked read and watch so they end their streams."""
        self.stopping = True
        self._notify_changed()
        for journal in list(self.journals.values()):
            with journal.cond:
                journal.cond.notify_all()

    def stop(self, persist_timeout: float = 30.0) -> None:
        """Roll non-empty spools, persist within ``persist_timeout`` seconds, stop threads."""
        self.begin_stop()
        self.refresher.stop()
        for journal in list(self.journals.values()):
            try:
                journal.roll_for_shutdown()
            except Exception as e:
                log.error("rolling %s at shutdown failed: %s", journal.name, e)
        started = time.monotonic()
        if not self.persister.drain(persist_timeout):
            log.warning("stopping with unpersisted fragments (kept on disk, persisted at next start)")
        log.debug("persister drained in %.3fs", time.monotonic() - started)
        self.persister.stop()
        for journal in list(self.journals.values()):
            journal.close()
        self.syncer.stop()
