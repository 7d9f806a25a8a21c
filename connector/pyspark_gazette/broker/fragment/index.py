"""A journal's fragment index: persisted fragments from its stores plus local spools.

Two sources feed it: the *remote* set, replaced by every store listing (and extended by the
persister as soon as it uploads a spool), and the journal's *local* spools (rolled spools still
waiting to be persisted and the current spool), which the journal passes in at query time.

:func:`cover_set` is what ListFragments returns; :meth:`FragmentIndex.query` answers a Read:
the longest fragment covering an offset, or the fragment a reader may jump to over a hole.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable
from dataclasses import dataclass

from pyspark_gazette.fragments import FragmentRef
from pyspark_gazette.protocol.durations import HOLE_JUMP_AGE


def cover_set(fragments: Iterable[FragmentRef]) -> list[FragmentRef]:
    """Fragments ordered by begin, dropping any fully covered by another.

    Of two fragments with the same span the persisted one is kept.
    """
    ordered = sorted(fragments, key=lambda f: (f.begin, -f.end, 0 if f.is_persisted else 1))
    out: list[FragmentRef] = []
    max_end = -1
    for f in ordered:
        # Sorted by begin, so an earlier fragment reaching max_end also begins at or before f.
        if f.end <= max_end or f.end == f.begin:
            continue
        out.append(f)
        max_end = f.end
    return out


@dataclass(frozen=True)
class QueryResult:
    """The fragment to serve for a read offset, and the (possibly jumped) offset."""

    fragment: FragmentRef
    offset: int


class FragmentIndex:
    """The remote fragment set of one journal. Not thread-safe: the journal's lock guards it."""

    def __init__(self) -> None:
        self.remote: dict[tuple[int, int, str], FragmentRef] = {}
        # Fragments the persister added since the last listing began, kept across a listing
        # that raced with the upload.
        self._recent: dict[tuple[int, int, str], tuple[FragmentRef, float]] = {}
        self._cover: list[FragmentRef] = []  # cover set of `remote`: begins and ends ascending
        self._begins: list[int] = []
        self._end = 0

    def _changed(self) -> None:
        self._cover = cover_set(self.remote.values())
        self._begins = [f.begin for f in self._cover]
        self._end = self._cover[-1].end if self._cover else 0

    @staticmethod
    def _key(f: FragmentRef) -> tuple[int, int, str]:
        return (f.begin, f.end, f.sum)

    def add_persisted(self, ref: FragmentRef) -> None:
        self.remote[self._key(ref)] = ref
        self._recent[self._key(ref)] = (ref, time.monotonic())
        self._changed()

    def replace_remote(self, listed: Iterable[FragmentRef], listing_started: float) -> None:
        """Install a store listing that began at ``listing_started`` (monotonic seconds)."""
        remote = {self._key(f): f for f in listed}
        for key, (ref, added) in list(self._recent.items()):
            if added >= listing_started:
                remote.setdefault(key, ref)
            else:
                del self._recent[key]
        self.remote = remote
        self._changed()

    def remote_end(self) -> int:
        return self._end

    def all(self, local: Iterable[FragmentRef]) -> list[FragmentRef]:
        """The cover set of the remote fragments and ``local`` (a new list, ordered by begin).

        Built from the remote cover set kept since the last change (a cover set of a cover set
        and more fragments is the cover set of them all): local spools that begin at or after
        every remote fragment's end are appended to it, without sorting the remote ones again.
        ListFragments asks for this once per page, so a journal of many fragments must not pay
        a sort of all of them each time.
        """
        spools = [f for f in local if f.end > f.begin]
        if all(f.begin >= self._end for f in spools):
            return self._cover + cover_set(spools)
        return cover_set(self._cover + spools)

    def query(
        self, offset: int, local: list[FragmentRef], *, begin_mod_time: int = 0, now: float | None = None
    ) -> QueryResult | None:
        """The fragment a read at ``offset`` is served from, or None if it must wait.

        A fragment covering ``offset`` wins (the one reaching furthest). Otherwise the read may
        jump forward to the next fragment when that one is persisted and either the hole is
        before the journal's first fragment or the fragment is older than 6 hours. Persisted
        fragments modified before ``begin_mod_time`` are ignored, so reads skip them.
        """
        now = time.time() if now is None else now
        best, nxt, first_begin = self._scan(offset, local, begin_mod_time)
        if best is not None:
            return QueryResult(best, offset)
        if nxt is None:
            return None
        skipped_by_mod_time = begin_mod_time and any(
            f.begin <= offset < f.end and f.mod_time and f.mod_time < begin_mod_time for f in self.remote.values()
        )
        if skipped_by_mod_time or (
            nxt.is_persisted and (offset < (first_begin or 0) or nxt.mod_time < now - HOLE_JUMP_AGE)
        ):
            return QueryResult(nxt, nxt.begin)
        return None

    def _scan(
        self, offset: int, local: list[FragmentRef], begin_mod_time: int
    ) -> tuple[FragmentRef | None, FragmentRef | None, int | None]:
        """(longest fragment covering offset, first fragment after it, first begin overall)."""
        best: FragmentRef | None = None
        nxt: FragmentRef | None = None
        first_begin: int | None = None

        def consider(f: FragmentRef) -> None:
            nonlocal best, nxt, first_begin
            if first_begin is None or f.begin < first_begin:
                first_begin = f.begin
            if f.begin <= offset < f.end:
                if best is None or f.end > best.end or (f.end == best.end and f.is_persisted and not best.is_persisted):
                    best = f
            elif f.begin > offset:
                if nxt is None or f.begin < nxt.begin or (f.begin == nxt.begin and f.end > nxt.end):
                    nxt = f

        for f in local:
            if f.end > f.begin:
                consider(f)
        if begin_mod_time:
            for f in self.remote.values():
                if not (f.mod_time and f.mod_time < begin_mod_time):
                    consider(f)
        elif self._cover:
            # The cover set is sorted with ascending ends: bisect instead of scanning it all.
            consider(self._cover[0])
            i = bisect.bisect_right(self._begins, offset) - 1
            if i >= 0:
                consider(self._cover[i])
            if i + 1 < len(self._cover):
                consider(self._cover[i + 1])
        return best, nxt, first_begin
