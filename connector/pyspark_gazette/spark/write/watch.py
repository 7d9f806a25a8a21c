"""What the exactly-once sink committed, watched until the fragment store holds it.

Gazette acknowledges an append once every replica of the journal's pipeline holds it in its
spool; the content reaches the fragment store only when a spool is rolled and persisted (by
the primary at once, by the other replicas from a persist queue a minute or more later). When a
journal's route changes, its new primary rolls every member's spool forward to the largest
offset any of them has, taking that member's registers, without copying content: a member that
had content the others lack keeps it only until it persists it. If every broker holding an
unpersisted spool is killed first, Gazette goes on past content it acknowledged: the write head
and the registers say the micro-batch was written, no broker or store holds it, and readers
block at the range (a Gazette reader) or report it as data loss (this connector's). With too
many failures at once Gazette can also start again below offsets it acknowledged
(``docs/reliability.md``).

An append can also be counted as written without an acknowledgement: when a primary dies while
sending an append's commit to its replicas, some replicas may commit it and others not; the
client sees an error and retries, and the new primary, having rolled forward to the replica that
committed it and taken its registers, refuses the retry with ``REGISTER_MISMATCH``. The sink
then reports the journal as already written, while the content is held by that one replica until
it persists it.

The sink cannot undo either, but it reports them. The driver remembers, per (query, journal),
the range its micro-batches' appends span, from the lowest offset not yet seen persisted to the
largest end committed, and the spans the commit messages name within it. At each later commit
of the query:

* a span of this batch that begins below the end of a span an earlier batch committed means the
  journal's write head went back: :class:`CommittedDataLost`;
* the range is listed (from the fragment covering its start: Gazette's page token is a begin
  offset); a hole in it, including between micro-batches (where a refused retry's content
  lies), is looked for in the listing of each route member (``do_not_proxy``) with Gazette's
  backoff until ``broker.timeout`` has passed, as a read waits out a hole
  (:mod:`pyspark_gazette.client.settle`); still missing, it is lost: :class:`CommittedDataLost`,
  naming the journal, the offsets and the micro-batch;
* the start moves up over the fragments listed as persisted.

A loss is reported once and forgotten, so the query can be started again from its checkpoint.
Best effort: the state lives in the process that runs the commits (a Python worker Spark
reuses), and a listing that fails is only logged.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any

from pyspark_gazette.client import JournalClient
from pyspark_gazette.client.conn import backoff
from pyspark_gazette.client.list_apply import ListedFragment
from pyspark_gazette.client.settle import member_listing
from pyspark_gazette.errors import GazetteError

log = logging.getLogger(__name__)

#: Where the loss is explained.
DOCS = "docs/reliability.md, 'Acknowledged is not persisted'"
#: Spans remembered per (query, journal) to name micro-batches; the oldest are forgotten beyond it.
SPAN_LIMIT = 4096


class CommittedDataLost(GazetteError):
    """Content a micro-batch of the sink committed is held by no broker and no fragment store."""


@dataclasses.dataclass(frozen=True)
class Span:
    begin: int
    end: int
    batch: int
    partition: int


@dataclasses.dataclass
class _Journal:
    #: The start of the committed range not yet seen persisted (None: nothing to watch).
    low: int | None = None
    #: The begin of the fragment covering ``low`` (a listing from it covers the range).
    token: int = 0
    #: The largest end any micro-batch of the query committed.
    end: int = 0
    spans: list[Span] = dataclasses.field(default_factory=list)
    #: The micro-batch of the last span forgotten (below ``low``), to name what a hole follows.
    before: int | None = None


_watched: dict[tuple[Any, str, str], _Journal] = {}
_clients: dict[Any, JournalClient] = {}
_lock = threading.Lock()


def client(connection: Any) -> JournalClient:
    with _lock:
        client = _clients.get(connection)
        if client is None:
            # The query's planning reached the address: a broker restarting is waited for
            # broker.timeout, as the tasks' clients do, not given up on after a few seconds.
            client = _clients[connection] = JournalClient(connection.client_config(task=True))
        return client


def commit(connection: Any, query: str, batch: int, spans: Iterable[tuple[int, str, int, int]]) -> None:
    """Check what earlier micro-batches of ``query`` committed through ``connection`` (a
    :class:`~pyspark_gazette.spark.options.ConnectionOptions`), then watch the
    ``(partition, journal, begin, end)`` spans of micro-batch ``batch``; raise
    :class:`CommittedDataLost` for anything lost."""
    by_journal: dict[str, list[Span]] = {}
    for partition, journal, begin, end in spans:
        by_journal.setdefault(journal, []).append(Span(begin, end, batch, partition))
    with _lock:
        journals = {k[2] for k in _watched if k[0] == connection and k[1] == query} | set(by_journal)
        watched = {j: _watched.setdefault((connection, query, j), _Journal()) for j in sorted(journals)}
    lost: list[str] = []
    for journal, state in watched.items():
        new = by_journal.get(journal, [])
        first = min(new, key=lambda s: s.begin) if new else None
        if first is not None and first.begin < state.end:
            lost.append(
                f"journal {journal!r}: micro-batch {batch} appended at offset {first.begin}, below offset "
                f"{state.end} that earlier micro-batches committed: every broker holding the journal's "
                f"unpersisted content stopped, and it started again below that content"
            )
            state.low, state.end, state.spans = None, 0, []  # reported once
        if state.low is not None and state.low < state.end:
            try:
                state.low, state.token, gone = _look_for(client(connection), journal, state.low, state.end, state.token)
            except GazetteError as e:
                log.warning("journal %r: could not list its fragments to check committed offsets: %s", journal, e)
                gone = []
            if gone:
                lost += [_lost(journal, hole, state.spans, state.before) for hole in gone]
                state.low = None  # reported once
        if first is not None:
            if state.low is None:
                state.low, state.token = first.begin, 0
            state.end = max([state.end, *(s.end for s in new)])
        known = [*state.spans, *new]
        state.spans = [s for s in known if state.low is not None and s.end > state.low][-SPAN_LIMIT:]
        state.before = max([s.batch for s in known if s not in state.spans], default=state.before)
    if lost:
        raise CommittedDataLost("; ".join(lost) + f" (see {DOCS})")


def _lost(journal: str, hole: tuple[int, int], spans: Sequence[Span], previous: int | None) -> str:
    begin, end = hole
    mine = [s for s in spans if s.begin < end and begin < s.end]
    if mine:
        who = "that " + ", ".join(f"micro-batch {s.batch} (partition {s.partition})" for s in mine) + " committed"
    else:
        before = [s.batch for s in spans if s.end <= begin] + ([] if previous is None else [previous])
        after = [s.batch for s in spans if s.begin >= end]
        who = (
            f"between micro-batches {max(before) if before else '?'} and {min(after) if after else '?'} "
            "(a retried append the registers refused as already written, or another writer's)"
        )
    return (
        f"journal {journal!r} lost offsets {begin}-{end} {who}: Gazette took the append, but no broker or "
        f"fragment store holds it: every broker holding it stopped before persisting it"
    )


def holes(frags: Sequence[ListedFragment], low: int, high: int) -> list[tuple[int, int]]:
    """Ranges of ``[low, high)`` that no fragment of ``frags`` covers."""
    out: list[tuple[int, int]] = []
    pos = low
    for f in sorted(frags, key=lambda f: f.spec.begin):
        if pos >= high:
            break
        if f.spec.begin > pos:
            out.append((pos, min(f.spec.begin, high)))
        pos = max(pos, f.spec.end)
    if pos < high:
        out.append((pos, high))
    return out


def persisted_to(frags: Sequence[ListedFragment], low: int) -> tuple[int, int]:
    """(the end of the persisted fragments covering ``[low, ...)`` without a gap, the begin of the
    listed fragment covering that end, or the end itself)."""
    pos = low
    for f in sorted(frags, key=lambda f: f.spec.begin):
        if f.spec.mod_time and f.spec.begin <= pos < f.spec.end:
            pos = f.spec.end
    token = min((f.spec.begin for f in frags if f.spec.begin <= pos < f.spec.end), default=pos)
    return pos, token


def _look_for(
    client: JournalClient, journal: str, low: int, high: int, token: int
) -> tuple[int, int, list[tuple[int, int]]]:
    """(the new start, its token, the holes of ``[low, high)`` that outlast ``broker.timeout``)."""
    conns = client.conns
    frags = client.list_fragments(journal, start=token, attempts=None)
    missing = holes(frags, low, high)
    if missing:
        budget = conns.config.broker_timeout
        deadline = time.monotonic() + (budget if budget is not None else 300.0)
        attempt = -1
        log.info("journal %r: committed offsets %s are not listed; asking the route's members", journal, missing)
        while True:
            route = conns.route(journal)
            for endpoint in list(route.endpoints) if route is not None else []:
                frags += member_listing(conns, journal, endpoint)
            missing = holes(frags, low, high)
            if not missing or time.monotonic() + backoff(attempt + 1) > deadline:
                break
            attempt += 1
            time.sleep(backoff(attempt))
            frags += client.list_fragments(journal, start=token, attempts=None)
    return (*persisted_to(frags, low), missing)
