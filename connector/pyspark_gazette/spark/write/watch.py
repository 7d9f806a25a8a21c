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

The sink cannot undo that, but it reports it. The driver remembers, per (query, journal), the
spans its micro-batches' commit messages name until a listing shows them persisted, and at each
later commit of the query:

* a span of this batch that begins below the end of a span an earlier batch committed means the
  journal's write head went back: :class:`CommittedDataLost`;
* an earlier span that no listed fragment covers is looked for in the listing of each route
  member (``do_not_proxy``) with Gazette's backoff until ``broker.timeout`` has passed, as a
  read waits out a hole (:mod:`pyspark_gazette.client.settle`); still missing, it is lost:
  :class:`CommittedDataLost`, naming the journal, the offsets and the micro-batch.

A lost span is reported once and forgotten, so the query can be started again from its
checkpoint. Best effort: the spans live in the process that runs the commits (a Python worker
Spark reuses), are forgotten after :data:`WATCH_SECONDS`, and a listing that fails is only logged.
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

#: Seconds a committed span is watched for before it is forgotten unseen.
WATCH_SECONDS = 3600.0
#: Spans watched per (query, journal); the oldest are forgotten beyond it.
WATCH_LIMIT = 4096
#: Seconds by which a store's clock may lag the driver's (the listing's ``begin_mod_time``).
CLOCK_MARGIN = 600
#: Where the loss is explained.
DOCS = "docs/reliability.md, 'Acknowledged is not persisted'"


class CommittedDataLost(GazetteError):
    """Content a micro-batch of the sink committed is held by no broker and no fragment store."""


@dataclasses.dataclass(frozen=True)
class Span:
    begin: int
    end: int
    batch: int
    partition: int
    at: float


@dataclasses.dataclass
class _Journal:
    spans: list[Span] = dataclasses.field(default_factory=list)
    #: The largest end any micro-batch of the query committed.
    end: int = 0


_watched: dict[tuple[Any, str, str], _Journal] = {}
_clients: dict[Any, JournalClient] = {}
_lock = threading.Lock()


def _client(connection: Any) -> JournalClient:
    with _lock:
        client = _clients.get(connection)
        if client is None:
            client = _clients[connection] = JournalClient(connection.client_config())
        return client


def commit(connection: Any, query: str, batch: int, spans: Iterable[tuple[int, str, int, int]]) -> None:
    """Watch the ``(partition, journal, begin, end)`` spans micro-batch ``batch`` of ``query``
    committed through ``connection`` (a :class:`~pyspark_gazette.spark.options.ConnectionOptions`),
    after checking those of its earlier batches; raise :class:`CommittedDataLost` for any lost."""
    now = time.time()
    by_journal: dict[str, list[Span]] = {}
    for partition, journal, begin, end in spans:
        by_journal.setdefault(journal, []).append(Span(begin, end, batch, partition, now))
    with _lock:
        journals = {k[2] for k in _watched if k[0] == connection and k[1] == query} | set(by_journal)
        watched = {j: _watched.setdefault((connection, query, j), _Journal()) for j in sorted(journals)}
    lost: list[str] = []
    for journal, state in watched.items():
        new = by_journal.get(journal, [])
        if new and min(s.begin for s in new) < state.end:
            first = min(new, key=lambda s: s.begin)
            lost.append(
                f"journal {journal!r}: micro-batch {batch} appended at offset {first.begin}, below offset "
                f"{state.end} that earlier micro-batches committed: every broker holding the journal's "
                f"unpersisted content stopped, and it started again below that content"
            )
            state.spans = [s for s in state.spans if s.end <= first.begin]
            state.end = 0  # reported once: from here on the journal's new offsets count
        earlier = [s for s in state.spans if now - s.at < WATCH_SECONDS][-WATCH_LIMIT:]
        if earlier:
            try:
                earlier, gone = _look_for(_client(connection), journal, earlier)
            except GazetteError as e:
                log.warning("journal %r: could not list its fragments to check committed offsets: %s", journal, e)
                gone = []
            lost += [
                f"journal {journal!r} lost offsets {s.begin}-{s.end} that micro-batch {s.batch} (partition "
                f"{s.partition}) committed: Gazette acknowledged the append, but no broker or fragment store "
                f"holds it: every broker holding it stopped before persisting it"
                for s in gone
            ]
        state.spans = [*earlier, *new][-WATCH_LIMIT:]
        state.end = max([state.end, *(s.end for s in new)])
    if lost:
        raise CommittedDataLost("; ".join(lost) + f" (see {DOCS})")


def _covered(span: Span, frags: Sequence[ListedFragment], persisted: bool = False) -> bool:
    """Whether ``frags`` (persisted ones only, with ``persisted``) cover all of ``span``."""
    pos = span.begin
    for f in sorted(frags, key=lambda f: f.spec.begin):
        if persisted and not f.spec.mod_time:
            continue
        if f.spec.begin <= pos < f.spec.end:
            pos = f.spec.end
        if pos >= span.end:
            return True
    return pos >= span.end


def _look_for(client: JournalClient, journal: str, spans: list[Span]) -> tuple[list[Span], list[Span]]:
    """(spans still to watch: not yet listed as persisted, spans lost) of ``journal``."""
    conns = client.conns
    since = int(min(s.at for s in spans)) - CLOCK_MARGIN
    frags = client.list_fragments(journal, begin_mod_time=since)
    missing = [s for s in spans if not _covered(s, frags)]
    if missing:
        budget = conns.config.broker_timeout
        deadline = time.monotonic() + (budget if budget is not None else 300.0)
        attempt = -1
        log.info("journal %r: committed offsets %s are not listed; asking the route's members", journal, missing)
        while missing:
            route = conns.route(journal)
            for endpoint in list(route.endpoints) if route is not None else []:
                frags += member_listing(conns, journal, endpoint)
            missing = [s for s in missing if not _covered(s, frags)]
            if not missing or time.monotonic() + backoff(attempt + 1) > deadline:
                break
            attempt += 1
            time.sleep(backoff(attempt))
            frags += client.list_fragments(journal, begin_mod_time=since)
    watch = [s for s in spans if s not in missing and not _covered(s, frags, persisted=True)]
    return watch, missing
