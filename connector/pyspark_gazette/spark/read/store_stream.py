"""Streams from a fragment store alone (``store.url`` with ``spark.readStream``), no broker.

The stream reader of :mod:`~pyspark_gazette.spark.read.stream` with its journals, write heads and
snapshots taken from the store (:mod:`~pyspark_gazette.spark.read.store_plan`) instead of the
brokers: a journal's offset advances to the end of its contiguous persisted history as new
fragments appear in the store. Each trigger lists the store once (``latestOffset``); the
micro-batch's planning and its read-committed state scans reuse that listing. Offsets,
partitions (cut at absolute multiples of ``maxPartitionBytes``: they depend on the offsets
alone), admission control, ``Trigger.AvailableNow``, read-committed states and so exactly-once
delivery into every sink are the broker stream's.

What differs: content is seen once it is persisted (a journal's ``fragment.flush_interval``, or
its fragment length, bounds the latency); a hole not yet decidable (a younger fragment after
it) holds the journal's offset at the hole until the fragment appears or the hole ages into a
loss; there are no creation revisions, so a journal whose history in the store went back (its
files deleted) waits at its offset rather than being taken for a re-created journal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from pyspark.sql.types import StructType

from pyspark_gazette.errors import JournalNotFoundError
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.committed import offset_of
from pyspark_gazette.spark.read.store_plan import StoreSnapshot, list_journals, snapshot
from pyspark_gazette.spark.read.stream import GazetteStreamReader

log = logging.getLogger(__name__)

_T = TypeVar("_T")

#: The last store listing of each running stream reader (by its token; the reader itself is
#: pickled to executors, the listing stays in the planning process).
_listings: dict[str, dict[str, StoreSnapshot]] = {}


class StoreStreamReader(GazetteStreamReader):
    """A stream of ``store.url``'s journals (module docstring)."""

    def __init__(self, opts: ReadOptions, schema: StructType):
        super().__init__(opts, schema)

    # -- the store in place of the brokers ---------------------------------------------------

    def _listing(self, *, fresh: bool = False) -> dict[str, StoreSnapshot]:
        """Every journal's store snapshot, from this trigger's listing (``fresh``: list now)."""
        got = None if fresh else _listings.get(self._token)
        if got is None:
            infos, fragments, _ = list_journals(self.opts)
            got = {i.name: snapshot(i, fragments[i.name], self.opts) for i in infos}
            _listings[self._token] = got
        return got

    def _client(self):
        return None  # no broker is contacted

    def _through_outages(self, fn: Callable[[], _T]) -> _T:
        return fn()

    def _journals(self, client, *, fresh: bool = False) -> list:
        return [s.snap.info for s in self._listing().values()]

    def _write_head(self, client, journal: str) -> int:  # type: ignore[override]
        return self._listing()[journal].snap.write_head

    def _earliest(self, client, journal: str) -> int:  # type: ignore[override]
        return self._listing()[journal].snap.earliest

    def _heads(self, client, *, fresh: bool = False) -> dict[str, int]:
        listing = self._listing(fresh=True)  # one listing per trigger
        self._created = {name: 0 for name in listing}
        self._infos = {name: s.snap.info for name, s in listing.items()}
        return {name: s.snap.write_head for name, s in listing.items()}

    def _confirmed_below(self, client, heads: dict[str, int], start: dict, new) -> dict[str, int]:
        """A journal whose persisted history in the store ends below the stream's offset (files
        deleted, or a listing that lags) waits at its offset: the store has no creation revision
        to tell a re-created journal by."""
        out = {}
        for journal, head in heads.items():
            if journal not in new and journal in start and head < offset_of(start[journal]):
                log.warning(
                    "journal %r: its persisted history in the store ends at %d, below the stream's offset %d; "
                    "waiting at the offset",
                    journal,
                    head,
                    offset_of(start[journal]),
                )
                out[journal] = offset_of(start[journal])
        return out

    def _snapshot(self, client, info, *, need: int = 0):
        s = self._listing().get(info.name)
        if s is None or need > s.snap.write_head:
            s = self._listing(fresh=True).get(info.name)
        if s is None:
            raise JournalNotFoundError("no longer in the store", journal=info.name)
        return s.snap

    def _settle(self, client, snap, begin: int, end: int):
        return snap  # holes were judged when the listing was taken (store_plan.snapshot)

    def _hold_at_holes(self, client, origin: dict[str, int], end: dict) -> dict:
        """Nothing to hold: a journal's head in the store already ends at its first hole not yet
        decidable (:func:`~pyspark_gazette.spark.read.store_plan.snapshot`)."""
        return {}

    def stop(self) -> None:
        _listings.pop(self._token, None)
        super().stop()
