"""Journals and their fragments from one listing of a fragment store, with no broker.

A persisted fragment describes itself: its key under the store's prefix is
``<journal>/<path postfix>/<begin>-<end>-<sha1><ext>`` (facts sheet 4.2), so one recursive
listing of the prefix (or of a directory below it) gives every journal's fragments. Where the
journal's name ends and the path postfix begins is not written anywhere, so it is decided so:

* with the journal names given, a file belongs to the longest given name that its directory is
  or lies below (a broker listing ``<journal>/`` recursively would take the same files);
* else, with ``postfix_depth``, that many trailing directory levels are the postfix;
* else a name ends at its last ``pivot=`` segment (an Estuary Flow journal:
  ``<collection>/<partition fields>/pivot=00``, whose files Flow writes under
  ``utc_date=.../utc_hour=...``), and otherwise at the directory holding the files.

A file whose name is not a fragment name is counted and skipped (never a failure); so is a file
at the prefix itself (no journal). :func:`read_chain` then resolves overlapping fragments as
Gazette's fragment index resolves a read: at each offset, the longest fragment covering it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Collection, Sequence

from pyspark_gazette.errors import FragmentNameError, redact_url
from pyspark_gazette.flow.labels import PIVOT
from pyspark_gazette.fragments.names import FragmentRef, parse_content_name
from pyspark_gazette.fragments.stores import FragmentStore

log = logging.getLogger(__name__)

#: Names of skipped files kept for the log and error messages.
SKIPPED_EXAMPLES = 3


@dataclasses.dataclass
class StoreListing:
    """One listing of a store: each journal's fragments (sorted by offsets), and the files that
    were not fragments of a journal (their count and a few of their keys)."""

    fragments: dict[str, list[FragmentRef]]
    files: int = 0
    skipped: int = 0
    #: Fragment files of journals not wanted.
    others: int = 0
    skipped_examples: list[str] = dataclasses.field(default_factory=list)

    def skip(self, key: str) -> None:
        self.skipped += 1
        if len(self.skipped_examples) < SKIPPED_EXAMPLES:
            self.skipped_examples.append(key)

    def skipped_text(self) -> str:
        """``N files that are not fragment names (e.g. 'a', 'b')``, or ``""`` when none were."""
        if not self.skipped:
            return ""
        ex = ", ".join(map(repr, self.skipped_examples))
        return f"{self.skipped} file(s) whose names are not fragment names (e.g. {ex})"


def common_directory(names: Sequence[str]) -> str:
    """The longest directory (ending in ``/``, or ``""``) that every one of ``names`` (journal
    names, or name prefixes) lies below: the one place a single listing must cover."""
    if not names:
        return ""
    first, last = min(names), max(names)
    n = 0
    while n < min(len(first), len(last)) and first[n] == last[n]:
        n += 1
    return first[:n].rpartition("/")[0] + "/" if "/" in first[:n] else ""


def split_directory(directory: str, journals: Collection[str] | None, postfix_depth: int | None) -> tuple[str, str]:
    """``(journal, path postfix)`` of a fragment file's directory (module docstring); journal
    ``""`` when it belongs to no journal wanted."""
    if journals is not None:
        candidate = directory
        while True:
            if candidate in journals:
                return candidate, directory[len(candidate) + 1 :]
            if "/" not in candidate:
                return "", ""
            candidate = candidate.rpartition("/")[0]
    segments = directory.split("/")
    if postfix_depth is not None:
        cut = len(segments) - postfix_depth
    else:
        pivots = [i for i, s in enumerate(segments) if s.startswith(PIVOT + "=")]
        cut = pivots[-1] + 1 if pivots else len(segments)
    if cut <= 0:
        return "", ""
    return "/".join(segments[:cut]), "/".join(segments[cut:])


def list_store(
    store: FragmentStore,
    under: str = "",
    *,
    journals: Collection[str] | None = None,
    postfix_depth: int | None = None,
) -> StoreListing:
    """Every fragment below ``store``'s prefix and ``under`` (a directory, or ``""``), by journal,
    in one listing (module docstring). ``journals``: the only journals wanted, whose names say
    where they end."""
    wanted = frozenset(journals) if journals is not None else None
    out = StoreListing({})
    for key, mod_time in store.list_keys(under):
        out.files += 1
        directory, _, name = key.rpartition("/")
        try:
            begin, end, sum_hex, codec = parse_content_name(name)
        except FragmentNameError:
            out.skip(key)
            continue
        if not directory:
            out.skip(key)
            continue
        journal, postfix = split_directory(directory, wanted, postfix_depth)
        if not journal:
            out.others += 1
            continue
        try:
            ref = FragmentRef(journal, begin, end, sum_hex, codec, store.url, mod_time, postfix)
        except FragmentNameError:
            out.skip(key)
            continue
        out.fragments.setdefault(journal, []).append(ref)
    for refs in out.fragments.values():
        refs.sort(key=lambda r: (r.begin, -r.end, -r.mod_time, r.path_postfix))
    if out.skipped:
        log.warning("store %s: skipped %s", redact_url(store.url), out.skipped_text())
    return out


def read_chain(refs: Sequence[FragmentRef]) -> list[FragmentRef]:
    """The fragments a read of ``refs`` goes through, as Gazette's index serves a read: from the
    first offset, at each offset the longest fragment covering it (``CoverSet``'s
    ``LongestOverlappingFragment``); where none covers it (a hole), the next fragment to begin,
    the longest among those beginning there. Fragments covered by others are never read, empty
    ones dropped. ``refs`` sorted by begin."""
    live = sorted((r for r in refs if r.end > r.begin), key=lambda r: (r.begin, -r.end))
    chain: list[FragmentRef] = []
    i, n = 0, len(live)
    while i < n:
        if not chain or live[i].begin > chain[-1].end:
            chain.append(live[i])  # the first, or after a hole: the longest of those beginning next
            i += 1
            continue
        pos = chain[-1].end
        best: FragmentRef | None = None
        while i < n and live[i].begin <= pos:
            if live[i].end > pos and (best is None or live[i].end > best.end):
                best = live[i]
            i += 1
        if best is not None:
            chain.append(best)
    return chain
