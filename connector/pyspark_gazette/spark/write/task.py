"""One Spark write task: route rows to journals, frame them, append through an AppendService.

Runs in a Python worker on an executor, once per task attempt (see
:class:`~pyspark_gazette.spark.write.batch.GazetteBatchWriter` for the write semantics). Arrow
batches come in; each batch is split by journal (the ``journal`` option, else the column),
encoded with :mod:`pyspark_gazette.spark.write.encode` and written to the journal's
:class:`~pyspark_gazette.client.AppendService` chain in pieces of whole messages. The service
batches the pieces into Append RPCs of about ``maxBatchBytes`` and pipelines them (the next
batch fills while one is in flight). Before returning its commit message the task flushes the
service, so every span it reports is durable in the broker.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterable
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from pyspark_gazette import testing
from pyspark_gazette.client import AppendService, AsyncAppend, Change, JournalClient, JournalInfo
from pyspark_gazette.errors import (
    EtcdTransactionFailedError,
    FramingError,
    GazetteError,
    JournalNotFoundError,
    JournalReadOnlyError,
    SpecError,
    SpecRefusedError,
    TransportError,
)
from pyspark_gazette.message import (
    TICK,
    Flags,
    Framing,
    build_uuid,
    clock_now,
    document_framings,
    jsondoc,
    new_producer_id,
    set_uuid_at,
)
from pyspark_gazette.protocol.specs import O_RDONLY
from pyspark_gazette.spark.lineage import SOURCE_HINT
from pyspark_gazette.spark.options import WriteOptions
from pyspark_gazette.spark.options.templates import spec_from_template, spec_template
from pyspark_gazette.spark.resolve import framing_of
from pyspark_gazette.spark.write.encode import Framed, frame_values, json_lines, uuid_strings
from pyspark_gazette.spark.write.persisted import check_journal as check_persistable

log = logging.getLogger(__name__)

FAIL_ENV = testing.FAIL_FIRST_ATTEMPT_ENV


@dataclasses.dataclass(frozen=True)
class WritePlan:
    """What every task needs to know, decided on the driver (primitives only)."""

    options: WriteOptions
    journal_column: str | None
    value_column: str | None
    json_columns: tuple[str, ...]
    #: Framing of journals resolved at planning (the ``journal`` option's).
    framings: tuple[tuple[str, Framing], ...] = ()
    #: String columns naming the journal a row was read from (``journal``, ``_journal``), checked
    #: against the ``journal`` option unless ``allowWriteToSource``: what the planning check
    #: (:mod:`~pyspark_gazette.spark.lineage`) cannot see, as ``INSERT INTO t SELECT * FROM t``
    #: of a catalog table, whose schema carries no mark.
    source_columns: tuple[str, ...] = ()


def resolve_journal(client: JournalClient, journal: str, options: WriteOptions) -> JournalInfo:
    """The journal's spec; created from ``createJournals`` when missing (a concurrent create is
    fine: Apply expects revision 0, and an Etcd transaction failure means someone else won)."""
    try:
        return client.get_journal(journal)
    except TransportError as e:
        if type(e) is not TransportError:
            raise  # auth refusals and timeouts say what they are
        raise TransportError(f"journal {journal!r}: {e.what}", e.code, e.details) from None
    except JournalNotFoundError:
        if not options.create_journals:
            raise JournalNotFoundError(
                "it does not exist; create it first or set the createJournals option to a spec template",
                journal=journal,
            ) from None
    spec = spec_from_template(journal, spec_template(options.create_journals))
    try:
        client.apply([Change(expect_mod_revision=0, upsert=spec)])
        log.info("created journal %s", journal)
    except EtcdTransactionFailedError:
        log.info("journal %s was created concurrently", journal)
    except SpecRefusedError as e:  # the client's classification of the broker's refusal
        raise SpecError(
            f"option 'createJournals': the broker refused the spec of journal {journal!r}: {e.details}"
        ) from None
    return client.get_journal(journal)


def check_writable(info: JournalInfo) -> None:
    """Raise :class:`JournalReadOnlyError` if the journal's flags forbid appends (``O_RDONLY``)."""
    if info.spec.flags & O_RDONLY:
        raise JournalReadOnlyError(info.name, info.spec.flags)


def check_framing(journal: str, framing: Framing, plan: WritePlan) -> None:
    """Raise if rows of ``plan`` cannot be written to a journal of ``framing``."""
    if plan.value_column is None and not framing.json_documents:
        raise FramingError(
            f"journal {journal!r} has {framing} framing: without a value column rows are written as "
            f"JSON documents, which needs {document_framings()} framing"
        )
    if plan.options.transactional and not framing.json_documents:
        raise FramingError(
            f"journal {journal!r} has {framing} framing: transactional writes need {document_framings()}"
        )


def pointer_prefix(pointer: str) -> tuple[str, str]:
    """JSON text before and after the UUID string for a document opening with ``pointer``."""
    keys = [k.replace("~1", "/").replace("~0", "~") for k in pointer[1:].split("/")]
    head = "{" + ":{".join(json.dumps(k, ensure_ascii=False) for k in keys) + ':"'
    return head, '"' + "}" * (len(keys) - 1)


class WriteTask:
    """The state of one task attempt; :meth:`run` consumes the batches and returns the totals."""

    def __init__(self, plan: WritePlan, partition: int, attempt: int):
        self.plan = plan
        self.opts = plan.options
        self.partition, self.attempt = partition, attempt
        self.framings = dict(plan.framings)
        self.links: dict[str, list[AsyncAppend]] = {}
        self.rows = 0
        self.bytes = 0
        self.piece = max(1, self.opts.max_batch_bytes // 8)
        self.producer = new_producer_id() if self.opts.transactional else b""
        self.clock = 0
        self.last_clock: dict[str, int] = {}
        self.fail_after = testing.fail_first_attempt_after(partition, attempt)

    def where(self, row: int) -> str:
        return f"row {row} of partition {self.partition}"

    def run(self, batches: Iterable[pa.RecordBatch]) -> tuple[list[tuple[str, int, int]], list[tuple[str, str, int]]]:
        """Write every batch; return (spans, transactions) once all appends are durable."""
        self.client = JournalClient(self.opts.connection.client_config(task=True))
        self.service = AppendService(self.client.conns, max_batch_bytes=self.opts.max_batch_bytes)
        ok = False
        try:
            for batch in batches:
                self._batch(batch)
                if self.fail_after and self.rows >= self.fail_after:
                    self.service.flush()
                    raise RuntimeError(f"{FAIL_ENV}: injected failure after {self.rows} rows (first attempt)")
            self.service.flush()
            spans = self._spans()
            ok = True
        finally:
            try:
                self.service.close(timeout=None if ok else 60)
            except Exception as e:  # noqa: BLE001 - the task already fails with the first error
                if ok:
                    raise
                log.warning("while failing, appends of partition %d did not finish: %s", self.partition, e)
            self.client.close()
        producer = self.producer.hex()
        txns = [(j, producer, c) for j, c in sorted(self.last_clock.items())]
        return spans, txns

    # -- routing ---------------------------------------------------------------------------

    def _batch(self, batch: pa.RecordBatch) -> None:
        n = batch.num_rows
        if n == 0:
            return
        base = self.rows
        if self.plan.journal_column is None:
            self._check_source(batch, base)
            self._write(str(self.opts.journal), batch, base, None)
        else:
            col = batch.column(self.plan.journal_column)
            if col.null_count:
                i = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
                raise GazetteError(f"{self.where(base + i)} has a null journal and the journal option is not set")
            names = pc.unique(col)
            if len(names) == 1:
                self._write(names[0].as_py(), batch, base, None)
            else:
                codes = pc.index_in(col, value_set=names).to_numpy(zero_copy_only=False)
                for k, name in enumerate(names.to_pylist()):
                    idx = np.flatnonzero(codes == k)
                    self._write(name, batch.take(pa.array(idx)), base, idx)
        self.rows += n

    def _check_source(self, batch: pa.RecordBatch, base: int) -> None:
        """Refuse rows read from the target journal (see ``allowWriteToSource``)."""
        target = str(self.opts.journal)
        for name in self.plan.source_columns:
            hits = pc.equal(batch.column(name), target)
            if pc.any(hits).as_py():
                i = int(np.flatnonzero(hits.fill_null(False).to_numpy(zero_copy_only=False))[0])
                raise GazetteError(
                    f"{self.where(base + i)} has {name} {target!r}, the journal this write appends to: "
                    f"the rows were read from it, so the query would write into its own source; {SOURCE_HINT}"
                )

    def _framing(self, journal: str) -> Framing:
        framing = self.framings.get(journal)
        if framing is None:
            info = resolve_journal(self.client, journal, self.opts)
            check_writable(info)
            if self.opts.persisted:
                check_persistable(journal, info)
            framing = framing_of(info, self.opts.framing)
            check_framing(journal, framing, self.plan)
            self.framings[journal] = framing
        return framing

    # -- encoding --------------------------------------------------------------------------

    def _write(self, journal: str, batch: pa.RecordBatch, base: int, idx: np.ndarray | None) -> None:
        framing = self._framing(journal)

        def where(i: int) -> str:
            return self.where(base + (int(idx[i]) if idx is not None else i))

        if self.plan.value_column is not None:
            values = batch.column(self.plan.value_column)
            if self.opts.transactional:
                values = self._stamp_values(journal, values, where)
            content = frame_values(values, framing, where)
        else:
            columns = [(name, batch.column(name)) for name in self.plan.json_columns]
            prefix = self._uuid_prefix(journal, batch.num_rows) if self.opts.transactional else None
            content = json_lines(columns, prefix)
        self._append(journal, content)

    def _clocks(self, journal: str, n: int) -> int:
        """Reserve ``n`` consecutive clocks (one :data:`TICK` apart) and return the first."""
        first = max(self.clock + TICK, clock_now())
        self.clock = first + (n - 1) * TICK
        self.last_clock[journal] = self.clock
        return first

    def _uuid_prefix(self, journal: str, n: int) -> pa.Array:
        first = self._clocks(journal, n)
        head, tail = pointer_prefix(self.opts.uuid_pointer)
        uuids = uuid_strings(self.producer, first, n, TICK, Flags.CONTINUE_TXN)
        return pc.binary_join_element_wise(head, uuids, tail, "")

    def _stamp_values(self, journal: str, values: pa.Array, where: Any) -> pa.Array:
        """Transactional ndjson ``value`` column: set the UUID in each document (per row)."""
        first = self._clocks(journal, len(values))
        out = []
        for i, raw in enumerate(values.to_pylist()):
            if raw is None:
                raise FramingError(f"{where(i)} has a null value; a message needs content")
            try:
                doc = jsondoc.loads(raw)
            except ValueError as e:
                raise FramingError(f"{where(i)}: a transactional value must be a JSON object: {e}") from None
            if not isinstance(doc, dict):
                raise FramingError(f"{where(i)}: a transactional value must be a JSON object")
            u = build_uuid(self.producer, first + i * TICK, Flags.CONTINUE_TXN)
            try:
                set_uuid_at(doc, u, self.opts.uuid_pointer)
            except ValueError as e:
                raise FramingError(f"{where(i)}: {e}") from None
            out.append(json.dumps(doc, ensure_ascii=False, separators=(",", ":")))
        return pa.array(out, pa.string())

    # -- appending -------------------------------------------------------------------------

    def _append(self, journal: str, content: Framed) -> None:
        """Write whole messages to the journal's append chain, at most ``piece`` bytes at once
        (a single larger message goes alone)."""
        data, offsets = content
        links = self.links.setdefault(journal, [])
        count = len(offsets) - 1
        start = 0
        while start < count:
            end = int(np.searchsorted(offsets, offsets[start] + self.piece, side="right")) - 1
            end = min(max(end, start + 1), count)
            piece = data[int(offsets[start]) : int(offsets[end])]
            aa = self.service.start_append(journal)
            with aa:  # an error rolls back exactly this piece
                aa.write(piece)
            if not links or links[-1] is not aa:
                links.append(aa)
            self.bytes += len(piece)
            start = end

    def _spans(self) -> list[tuple[str, int, int]]:
        """The committed spans of every append, adjacent ones merged."""
        spans: list[tuple[str, int, int]] = []
        for journal, links in sorted(self.links.items()):
            for aa in links:
                frag = aa.wait()
                if frag is None or frag.end == frag.begin:
                    continue
                if spans and spans[-1][0] == journal and spans[-1][2] == frag.begin:
                    spans[-1] = (journal, spans[-1][1], frag.end)
                else:
                    spans.append((journal, frag.begin, frag.end))
        return spans
