"""``commitWhen=persisted``: a write commits only once the fragment store holds what it appended.

Gazette acknowledges an append held in the spools of the journal's replicas; the content
reaches the fragment store when a spool is rolled and persisted (at the journal's
``flush_interval``, or when it reaches ``fragment.length``). If every broker holding an
unpersisted spool dies first, Gazette loses acknowledged content (``docs/reliability.md``).
With ``commitWhen=persisted`` the driver, before it lets a batch write report success or a
micro-batch commit, waits until every span the write's tasks appended is covered by fragments
listed as persisted (``mod_time`` set). What it waits with:

* the journal's fragments are listed (from the fragment covering the lowest span: Gazette's
  page token is a begin offset), again with a short backoff while a span is not persisted;
* while one is listed but not persisted, a zero-byte append (what Gazette's primary sends itself
  every minute, its "pulse") goes to the journal about every second: an append rolls the open
  spool, which the primary then persists, once the spool holds more than ``fragment.length``
  or a ``flush_interval`` boundary (UTC) has passed since its first append. So the wait is about
  one persist when the write's appends exceed ``fragment.length``, else up to the next
  ``flush_interval`` boundary (at least a minute in Gazette);
* a span that no listed fragment covers (the write head went back below it, or a hole) is
  looked for in the listing of each route member (``do_not_proxy``), as the sink's watch does
  (:mod:`pyspark_gazette.spark.write.watch`); still missing when ``broker.timeout`` has passed,
  it is **lost**;
* a span still unpersisted at ``broker.timeout`` fails the commit as not persisted (not lost).

A batch write then fails naming what was lost. The streaming sink records, in its checkpoint
directory, which partitions of the micro-batch were lost and which were persisted, and fails
the micro-batch (:mod:`pyspark_gazette.spark.write.stream`); the query's next start re-runs it:
the persisted partitions do not append again, the lost ones append under a new register value.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any

from pyspark_gazette.client import JournalClient, JournalInfo
from pyspark_gazette.client.conn import backoff
from pyspark_gazette.client.list_apply import ListedFragment
from pyspark_gazette.client.settle import member_listing
from pyspark_gazette.errors import GazetteError, OptionError
from pyspark_gazette.protocol.durations import duration_seconds
from pyspark_gazette.spark.write.watch import holes

log = logging.getLogger(__name__)

#: Longest pause between two listings while a span is not yet persisted (seconds).
MAX_POLL = 0.5
#: Seconds a missing span is looked for when ``broker.timeout`` is 0 (no limit), as the sink's watch does.
LOST_AFTER = 300.0
#: Seconds between two zero-byte appends that roll the open spool when it is due.
PULSE_EVERY = 1.0
#: Where the sink keeps what it found lost, under its checkpoint directory.
RECORD_DIR = "gazette-persisted"


class NotPersistedError(GazetteError):
    """Appended spans were still not persisted (nor lost) when ``broker.timeout`` ran out."""


class PersistedLostError(GazetteError):
    """Gazette acknowledged spans of a ``commitWhen=persisted`` write and lost them before persisting them."""


_tokens: dict[tuple[Any, str], int] = {}
_tokens_lock = threading.Lock()


def check_journal(journal: str, info: JournalInfo) -> None:
    """Refuse ``commitWhen=persisted`` for a journal that never persists a small append."""
    frag = info.spec.fragment
    missing = []
    if not list(frag.stores):
        missing.append("no fragment store")
    if not duration_seconds(frag.flush_interval):
        missing.append("no flush_interval")
    if missing:
        raise OptionError(
            "commitWhen",
            f"'persisted' needs journal {journal!r} to persist its spools on a timer, but it has "
            f"{' and '.join(missing)} (set fragment.stores and fragment.flush_interval in its spec, or use "
            "commitWhen=acknowledged)",
        )


def poll(attempt: int) -> float:
    """Pause before listing again: Gazette's backoff, at most :data:`MAX_POLL`."""
    return min(MAX_POLL, max(backoff(attempt), 0.05))


def covered(frags: Sequence[ListedFragment], begin: int, end: int, *, persisted: bool) -> list[tuple[int, int]]:
    """Ranges of ``[begin, end)`` not covered by ``frags`` (only persisted ones with ``persisted``)."""
    return holes([f for f in frags if f.spec.mod_time] if persisted else frags, begin, end)


def _merge(spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for b, e in sorted(spans):
        if out and b <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((b, e))
    return out


def wait_persisted(client: JournalClient, journal: str, spans: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Wait until fragments listed as persisted cover every ``(begin, end)`` of ``spans``;
    return the ranges lost (listed by no route member until ``broker.timeout``), [] once all
    are persisted. Raise when something
    is still unpersisted (but not lost) at ``broker.timeout``: :class:`NotPersistedError`."""
    want = _merge([s for s in spans if s[1] > s[0]])
    if not want:
        return []
    conns = client.conns
    key = (client.config.address, journal)
    with _tokens_lock:
        token = _tokens.get(key, 0)
    if token > want[0][0]:
        token = 0
    budget = conns.config.broker_timeout
    started = time.monotonic()
    deadline = started + budget if budget is not None else None
    lost_after = started + (budget if budget is not None else LOST_AFTER)  # broker.timeout 0: not forever
    attempt = 0
    pulsed = 0.0
    warned = False
    while True:
        frags = client.list_fragments(journal, start=token, attempts=None)
        pending = [r for b, e in want for r in covered(frags, b, e, persisted=True)]
        if not pending:
            ends = [f.spec.begin for f in frags if f.spec.begin <= want[-1][1] - 1 < f.spec.end]
            with _tokens_lock:
                _tokens[key] = min(ends, default=token)
            log.info("journal %r: offsets %s persisted after %.2fs", journal, _ranges(want), time.monotonic() - started)
            return []
        missing = [r for b, e in pending for r in covered(frags, b, e, persisted=False)]
        if missing:  # the route's members may list what the listed broker does not
            route = conns.route(journal)
            for endpoint in list(route.endpoints) if route is not None else []:
                frags += member_listing(conns, journal, endpoint)
            missing = [r for b, e in pending for r in covered(frags, b, e, persisted=False)]
        now = time.monotonic()
        if not missing and now - pulsed >= PULSE_EVERY:
            pulsed = now
            _pulse(client, journal)
        if missing and now + poll(attempt) > lost_after:
            return _merge(missing)
        if deadline is not None and now + poll(attempt) > deadline:
            raise NotPersistedError(
                f"commitWhen=persisted: journal {journal!r} acknowledged offsets {_ranges(pending)} but did not "
                f"persist them within broker.timeout ({budget:g}s): can its brokers reach its fragment store, "
                "and is its flush_interval shorter than broker.timeout?"
            )
        if missing and not warned:
            warned = True
            log.warning(
                "journal %r: appended offsets %s are listed by no broker; looking for them until broker.timeout",
                journal,
                _ranges(missing),
            )
        time.sleep(poll(attempt))
        attempt += 1


def _pulse(client: JournalClient, journal: str) -> None:
    """A zero-byte append: the broker rolls the journal's open spool if it is due (longer than
    ``fragment.length``, or past a ``flush_interval`` boundary), and the roll persists it."""
    try:
        client.appender(journal).close()
    except GazetteError as e:  # only a nudge: the listing decides
        log.debug("journal %r: zero-byte append to roll its spool failed: %s", journal, e)


def _ranges(spans: Sequence[tuple[int, int]]) -> str:
    return ", ".join(f"{b}-{e}" for b, e in spans)


def wait_all(client: JournalClient, spans: Sequence[tuple[str, int, int]]) -> dict[str, list[tuple[int, int]]]:
    """:func:`wait_persisted` for each journal of ``(journal, begin, end)`` spans; the lost
    ranges by journal (journals with nothing lost left out)."""
    by_journal: dict[str, list[tuple[int, int]]] = {}
    for journal, begin, end in spans:
        by_journal.setdefault(journal, []).append((begin, end))
    lost: dict[str, list[tuple[int, int]]] = {}
    for journal, mine in sorted(by_journal.items()):
        gone = wait_persisted(client, journal, mine)
        if gone:
            lost[journal] = gone
    return lost


# -- the sink's record of lost partitions --------------------------------------------------------


@dataclasses.dataclass
class Record:
    """What the persisted check found of one micro-batch, per journal: partitions whose append was
    persisted (a re-run does not append them again) and partitions whose append was lost, with
    how many times (a re-run appends them under register value ``<batch>.<times>``)."""

    persisted: dict[str, set[int]] = dataclasses.field(default_factory=dict)
    lost: dict[str, dict[int, int]] = dataclasses.field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(
            {
                "persisted": {j: sorted(ps) for j, ps in sorted(self.persisted.items())},
                "lost": {j: {str(p): n for p, n in sorted(ls.items())} for j, ls in sorted(self.lost.items())},
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> Record:
        raw = json.loads(text)
        return cls(
            persisted={j: set(ps) for j, ps in raw.get("persisted", {}).items()},
            lost={j: {int(p): int(n) for p, n in ls.items()} for j, ls in raw.get("lost", {}).items()},
        )


def checkpoint_dir(location: str | None) -> str:
    """The local directory of a checkpoint location (a path or a ``file:`` URL)."""
    if not location:
        raise OptionError(
            "commitWhen", "'persisted' in a stream needs the checkpointLocation option (where it records lost batches)"
        )
    url = urllib.parse.urlsplit(location)
    if url.scheme in ("", "file"):
        return url.path if url.scheme else location
    raise OptionError(
        "commitWhen",
        f"'persisted' in a stream needs a local checkpointLocation (a path or file: URL), not {location!r}",
    )


def load_records(directory: str) -> dict[int, Record]:
    """Every micro-batch's :class:`Record` under ``directory`` (a checkpoint directory)."""
    root = os.path.join(directory, RECORD_DIR)
    out: dict[int, Record] = {}
    if not os.path.isdir(root):
        return out
    for name in os.listdir(root):
        if name.endswith(".json") and name[:-5].isdigit():
            with open(os.path.join(root, name), encoding="utf-8") as f:
                out[int(name[:-5])] = Record.from_json(f.read())
    return out


def save_record(directory: str, batch: int, record: Record) -> None:
    """Write ``record`` for ``batch`` atomically (a temporary file renamed over it)."""
    root = os.path.join(directory, RECORD_DIR)
    os.makedirs(root, exist_ok=True)
    path = os.path.join(root, f"{batch}.json")
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(record.to_json())
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def lost_error(what: str, lost: dict[str, list[tuple[int, int]]]) -> str:
    return "; ".join(f"journal {j!r} lost offsets {_ranges(r)}" for j, r in sorted(lost.items())) + (
        f": Gazette acknowledged {what} but no broker or fragment store holds it (every broker holding it "
        "stopped before persisting it; see docs/reliability.md, 'Acknowledged is not persisted')"
    )
