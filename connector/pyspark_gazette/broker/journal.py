"""Per-journal state: spec, spools, registers, fragment index and the append sequence.

Locking. ``append_lock`` serialises appends (Gazette's pipeline): the holder owns the current
spool's sequenced end and the sequenced registers. ``cond`` guards what readers see (durable
spool ends, the spool list, the remote index) and is notified whenever that grows, so blocked
reads wake up without polling.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import shutil
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from pyspark_gazette._fs import fsync_dir
from pyspark_gazette.broker.fragment.index import FragmentIndex, QueryResult
from pyspark_gazette.broker.fragment.spool import CommitRecord, Spool, list_spool_begins
from pyspark_gazette.broker.specs import SpecEntry
from pyspark_gazette.fragments import FragmentRef
from pyspark_gazette.protocol import pb
from pyspark_gazette.protocol.durations import duration_seconds
from pyspark_gazette.protocol.labels import matches
from pyspark_gazette.protocol.specs import O_RDONLY, O_WRONLY

if TYPE_CHECKING:
    from pyspark_gazette.broker.fragment.syncer import Syncer

log = logging.getLogger(__name__)


def apply_registers(registers: pb.LabelSet, union: pb.LabelSet, subtract: pb.LabelSet) -> pb.LabelSet:
    """Subtract exact (name, value) matches, then union: union values replace a name's values."""
    pairs = {(label.name, label.value) for label in registers.labels}
    pairs -= {(label.name, label.value) for label in subtract.labels}
    names = {label.name for label in union.labels}
    pairs = {p for p in pairs if p[0] not in names} | {(label.name, label.value) for label in union.labels}
    return pb.LabelSet(labels=[pb.Label(name=n, value=v) for n, v in sorted(pairs)])


def state_dir_name(journal: str) -> str:
    return hashlib.sha1(journal.encode()).hexdigest()[:24]


class Journal:
    def __init__(
        self,
        entry: SpecEntry,
        state_dir: str,
        syncer: Syncer,
        on_rolled: Callable[[Journal, Spool], None],
        on_first_append: Callable[[Journal], None] | None = None,
    ):
        self.name = entry.spec.name
        self.entry = entry
        self.state_dir = state_dir
        self._syncer = syncer
        self._on_rolled = on_rolled
        self._on_first_append = on_first_append  # a spool's flush interval starts: time its roll
        self.cond = threading.Condition()
        self.append_lock = threading.Lock()
        self.index = FragmentIndex()
        self.listed = threading.Event()  # set after the first store listing
        self.spools: list[Spool] = []  # rolled-but-unpersisted spools, then the current one
        self.current: Spool | None = None
        self.seq_registers = pb.LabelSet()
        self.closed = False
        name_file = os.path.join(state_dir, "journal")
        if not os.path.exists(name_file):
            os.makedirs(state_dir, exist_ok=True)
            with open(name_file, "w") as f:
                f.write(self.name)
            fsync_dir(state_dir)
            fsync_dir(os.path.dirname(state_dir))  # the new directory's own entry
        self._recover()

    # ---------------------------------------------------------------- spec

    @property
    def spec(self) -> pb.JournalSpec:
        return self.entry.spec

    def update_entry(self, entry: SpecEntry) -> None:
        with self.cond:
            self.entry = entry
            self.cond.notify_all()

    @property
    def readable(self) -> bool:
        return not (self.spec.flags & O_WRONLY)

    @property
    def writable(self) -> bool:
        return not (self.spec.flags & O_RDONLY)

    # ---------------------------------------------------------------- recovery

    def _recover(self) -> None:
        spools = []
        for begin in list_spool_begins(self.state_dir):
            spool = Spool.recover(self.name, self.state_dir, begin)
            if spool is not None:
                spools.append(spool)
        for spool in spools[:-1]:
            spool.rolled = True
        self.spools = [s for s in spools if s.end > s.begin or s is spools[-1]]
        for spool in spools:
            if spool not in self.spools:
                spool.close()
                spool.remove_files()
        if self.spools:
            self.current = self.spools[-1]
            self.seq_registers = self.current.durable.registers_proto()
        for spool in self.spools[:-1]:
            spool.close()
        if self.spools:
            log.info(
                "journal %s recovered %d spool(s), write head %d", self.name, len(self.spools), self.spools[-1].end
            )

    def pending_persist(self) -> list[Spool]:
        """Rolled spools that still need to be persisted."""
        with self.cond:
            return [s for s in self.spools if s.rolled]

    # ---------------------------------------------------------------- what readers see

    def local_refs(self) -> list[FragmentRef]:
        """Local fragments at their durable ends (caller holds ``cond``)."""
        return [FragmentRef(self.name, s.begin, s.end, s.sum_hex(), s.codec) for s in self.spools if s.end > s.begin]

    def spool_for(self, ref: FragmentRef) -> Spool | None:
        for s in self.spools:
            if s.begin == ref.begin and not ref.backing_store:
                return s
        return None

    def write_head(self) -> int:
        """The journal's end offset (caller holds ``cond``)."""
        local = self.spools[-1].end if self.spools else 0
        return max(local, self.index.remote_end())

    def query(self, offset: int, begin_mod_time: int = 0) -> QueryResult | None:
        return self.index.query(offset, self.local_refs(), begin_mod_time=begin_mod_time)

    def registers(self) -> pb.LabelSet:
        with self.cond:
            return self.spools[-1].durable.registers_proto() if self.spools else pb.LabelSet()

    def on_durable(self, spool: Spool, record: CommitRecord) -> None:
        with self.cond:
            self.cond.notify_all()

    # ---------------------------------------------------------------- store listings

    def install_listing(self, fragments: list[FragmentRef], started: float) -> None:
        with self.cond:
            self.index.replace_remote(fragments, started)
            self.cond.notify_all()
        self.listed.set()

    def on_persisted(self, spool: Spool, ref: FragmentRef) -> None:
        """Swap a rolled spool for its persisted fragment, then drop the local files."""
        with self.cond:
            self.index.add_persisted(ref)
            if spool in self.spools:
                self.spools.remove(spool)
            self.cond.notify_all()
        spool.remove_files()

    # ---------------------------------------------------------------- the append sequence
    # All of these are called with append_lock held.

    def pipeline_head(self) -> int:
        """Where the next append would begin (sequenced, not necessarily durable)."""
        if self.current is not None:
            return self.current.seq_end
        with self.cond:
            return self.index.remote_end()

    def check_registers(self, selector: pb.LabelSelector) -> bool:
        return not self.seq_registers.labels or matches(selector, self.seq_registers)

    def needs_roll(self, now: float) -> bool:
        spool = self.current
        if spool is None:
            return True
        if spool.content_length > self.spec.fragment.length:
            return True
        flush = duration_seconds(self.spec.fragment.flush_interval)
        if flush and spool.first_append_time:
            return math.floor(now / flush) != math.floor(spool.first_append_time / flush)
        return False

    def roll(self, begin: int) -> Spool:
        """Close the current spool (hand it to the persister) and start a new one at ``begin``."""
        old = self.current
        if old is not None:
            self._syncer.flush(old)
        registers = self.seq_registers.SerializeToString(deterministic=True)
        new = Spool.create(self.name, self.state_dir, begin, self.spec.fragment.compression_codec, registers)
        with self.cond:
            if old is not None:
                old.rolled = True
                if old.end == old.begin:
                    self.spools.remove(old)
            self.spools.append(new)
            self.current = new
            self.cond.notify_all()
        if old is not None:
            old.close()
            if old.end == old.begin:
                old.remove_files()
            else:
                self._on_rolled(self, old)
        return new

    def maybe_roll(self, now: float, target: int | None = None) -> Spool:
        head = self.pipeline_head() if target is None else target
        if self.current is None or self.current.seq_end != head:
            return self.roll(head)
        if self.current.seq_end > self.current.begin and self.needs_roll(now):
            return self.roll(head)
        return self.current

    def commit(self, spool: Spool, registers: pb.LabelSet, now: float) -> CommitRecord:
        """Sequence a non-empty append's commit and submit it to the syncer (not yet durable)."""
        self.seq_registers = registers
        first = not spool.first_append_time
        record = spool.make_record(registers.SerializeToString(deterministic=True), now)
        self._syncer.submit(spool, record)
        if first and spool.first_append_time and self._on_first_append is not None:
            self._on_first_append(self)
        return record

    def barrier(self) -> None:
        """Wait for everything sequenced so far to be durable (zero-byte appends)."""
        if self.current is not None:
            self._syncer.flush(self.current)

    def wait_durable(self, spool: Spool, end: int) -> None:
        self._syncer.wait(spool, end)

    def roll_idle(self, now: float) -> None:
        """Roll a spool whose flush interval passed with no append since (best effort)."""
        if not self.append_lock.acquire(blocking=False):
            return
        try:
            spool = self.current
            if spool is not None and spool.seq_end > spool.begin and self.needs_roll(now) and not self.closed:
                self.roll(spool.seq_end)
        finally:
            self.append_lock.release()

    def roll_for_shutdown(self) -> None:
        with self.append_lock:
            spool = self.current
            if spool is not None and spool.seq_end > spool.begin:
                self.roll(spool.seq_end)

    # ---------------------------------------------------------------- lifecycle

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        with self.append_lock:
            if self.current is not None:
                self._syncer.flush(self.current)
                self.current.close()

    def destroy(self) -> None:
        """Forget the journal's local state (after the journal was deleted)."""
        self.close()
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def flush_interval_deadline(self) -> float | None:
        """Unix time at which the current spool's flush interval boundary passes, if any."""
        flush = duration_seconds(self.spec.fragment.flush_interval)
        spool = self.current
        if not flush or spool is None or not spool.first_append_time:
            return None
        return (math.floor(spool.first_append_time / flush) + 1) * flush

    @staticmethod
    def now() -> float:
        return time.time()
