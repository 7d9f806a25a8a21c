"""Batch writes: ``df.write.format("gazette").mode("append").save()``.

Which journal: the ``journal`` option (or the ``save()`` path), else the ``journal`` column row
by row. With the option, a ``journal`` column routes nothing and is not written (as Spark's Kafka
sink treats a ``topic`` column when its ``topic`` option is set). A write whose rows would land
in a journal the same query reads is refused at planning, unless ``allowWriteToSource`` is true
(a stream would read back its own output forever): see :mod:`pyspark_gazette.spark.lineage`.
Where the schema does not show the read, a row whose ``journal`` or ``_journal`` column names
the option's journal fails the task before its batch is appended. What is written:

* a ``value`` column (string or binary) is written as it is, one message per row, framed for
  the journal: a newline-terminated line for ndjson, lines and csv (a value containing a
  newline is an error; csv allows one inside quotes), the 8-byte header for protobuf-fixed;
  other columns (except ``journal``) are then ignored;
* without a ``value`` column, on an ndjson journal, every column but ``journal`` is encoded
  as one JSON document per row (types as in :mod:`pyspark_gazette.spark.write.encode`).

A journal's framing is the ``framing`` option, else its ``content-type`` label. A missing
journal fails the write, at planning for the ``journal`` option and in the task for column
values, unless ``createJournals`` gives a spec template to create it with; so does a read-only
journal (``O_RDONLY`` in its spec's flags), before anything is appended.

**Delivery semantics.** Journals are append-only, so ``mode("overwrite")`` is refused and
nothing can be taken back:

* Each Append RPC is atomic: a journal never shows part of one, and no message is split
  between two (the writer only ever appends whole messages).
* A task flushes all its appends before it reports success; its commit message lists the
  durable spans ``(journal, begin, end)`` plus its row and byte counts. A failing task rolls
  back the piece it is writing and waits for appends already handed to the service.
* Plain writes are **at-least-once**: when a task attempt fails after some of its appends
  committed and Spark retries it (or runs a speculative copy), both attempts' rows stay in
  the journal. :meth:`GazetteBatchWriter.abort` can only log what stays.
* ``transactional=true`` (ndjson only) makes them **exactly-once for read-committed readers**:
  each task attempt publishes as a fresh Gazette producer, every row carries a CONTINUE_TXN
  message UUID at ``uuidPointer`` (first in the document), and the task's commit message
  carries ``(journal, producer, last clock)``. Only :meth:`GazetteBatchWriter.commit` on the
  driver, after Spark picked one successful attempt per partition, appends one ACK_TXN
  message per (journal, producer), with clock = last clock + 1 tick, which commits that
  attempt's rows. Failed, speculative and aborted attempts are never acknowledged, so
  read-committed readers (this project's Sequencer, ``readCommitted=true``, Gazette
  consumers) never see their rows; read-uncommitted reads do. If the driver fails half-way
  through appending ACKs, the journals it acknowledged are committed and the others are not.

**Metrics.** Rows and bytes per task travel in the commit messages and are logged by
``commit``. pyspark 4.3's Python data source API has no custom metrics for writers, so they do
not appear in the Spark UI.
"""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from pyspark_gazette import testing
from pyspark_gazette.client import JournalClient
from pyspark_gazette.errors import GazetteError, OptionError
from pyspark_gazette.message import TICK, Flags, build_uuid
from pyspark_gazette.spark import lineage
from pyspark_gazette.spark.options import WriteOptions
from pyspark_gazette.spark.resolve import framing_of
from pyspark_gazette.spark.surface import plain
from pyspark_gazette.spark.write import persisted
from pyspark_gazette.spark.write.task import (
    WritePlan,
    WriteTask,
    check_framing,
    check_writable,
    pointer_prefix,
    resolve_journal,
)

log = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class GazetteCommitMessage(WriterCommitMessage):
    """What one successful task attempt appended (durable when the message is sent)."""

    partition: int
    attempt: int
    #: ``(journal, begin, end)`` of the task's appends, adjacent ones merged.
    spans: tuple[tuple[str, int, int], ...]
    rows: int
    bytes: int
    #: Transactional writes: ``(journal, producer id hex, clock of the last row)``.
    transactions: tuple[tuple[str, str, int], ...] = ()


class GazetteBatchWriter(DataSourceArrowWriter):
    """The batch writer; see the module docstring for the semantics."""

    def __init__(
        self,
        options: WriteOptions,
        schema: StructType,
        overwrite: bool,
        reads: tuple[tuple[str, lineage.Read], ...] = (),
    ):
        if overwrite:
            raise GazetteError(
                "Gazette journals are append-only: mode('overwrite') cannot replace their content; use mode('append')"
            )
        self.options = options
        self.schema = schema
        by_name = {f.name.lower(): f for f in schema.fields}
        journal_field = by_name.get("journal")
        value_field = by_name.get("value")
        if journal_field is not None and not options.journal and not isinstance(journal_field.dataType, StringType):
            raise GazetteError(f"the journal column must be a string, not {journal_field.dataType.simpleString()}")
        if value_field is not None and not isinstance(value_field.dataType, (StringType, BinaryType)):
            raise GazetteError(f"the value column must be string or binary, not {value_field.dataType.simpleString()}")
        if journal_field is None and not options.journal:
            raise OptionError("journal", "is required: set the journal option (or save(path)) or add a journal column")
        if journal_field is not None and not options.journal:
            lineage.check_routing(journal_field.name, reads, options.connection.address)
        json_columns = tuple(f.name for f in schema.fields if f is not journal_field)
        if value_field is None:
            if not json_columns:
                raise GazetteError("nothing to write: the DataFrame has no value column and no other columns")
            if options.transactional:
                first = options.uuid_pointer[1:].split("/")[0].replace("~1", "/").replace("~0", "~")
                clash = [c for c in json_columns if c == first]
                if clash:
                    raise OptionError(
                        "uuidPointer",
                        f"{options.uuid_pointer!r} would replace column {clash[0]!r}; drop or rename the column",
                    )
        # With the journal option, the rows' journal names only say where they came from: a row
        # naming the target journal was read from it. Columns whose read the schema does not show
        # (a catalog table's, a user's schema's) are checked in the task, before appending.
        source_columns = (
            tuple(
                f.name
                for f in schema.fields
                if f.name.lower() in ("journal", "_journal") and isinstance(f.dataType, StringType)
            )
            if options.journal and not options.allow_write_to_source
            else ()
        )
        plan = WritePlan(
            options=options,
            journal_column=journal_field.name if journal_field is not None and not options.journal else None,
            source_columns=source_columns,
            value_column=value_field.name if value_field is not None else None,
            json_columns=json_columns if value_field is None else (),
        )
        if options.journal:
            # Resolve (or create) the option's journal now, so a mistake fails before any task.

            lineage.check_target(options.journal, reads, options.connection.address)
            with JournalClient(options.connection.client_config()) as client:
                info = resolve_journal(client, options.journal, options)
            check_writable(info)
            lineage.check_target(options.journal, reads, options.connection.address, info)
            if options.persisted:
                persisted.check_journal(options.journal, info)
            framing = framing_of(info, options.framing)
            check_framing(options.journal, framing, plan)
            plan = dataclasses.replace(plan, framings=((options.journal, framing),))
        self.plan = plan

    def __repr__(self) -> str:
        return f"GazetteBatchWriter(journal={self.options.journal!r}, transactional={self.options.transactional})"

    # -- executors -------------------------------------------------------------------------

    @plain
    def write(self, iterator):  # type: ignore[no-untyped-def]  # Iterator[pa.RecordBatch]
        from pyspark import TaskContext

        ctx = TaskContext.get()
        partition = ctx.partitionId() if ctx is not None else 0
        attempt = ctx.attemptNumber() if ctx is not None else 0
        task = WriteTask(self.plan, partition, attempt)
        spans, txns = task.run(iterator)
        return GazetteCommitMessage(partition, attempt, tuple(spans), task.rows, task.bytes, tuple(txns))

    # -- driver ----------------------------------------------------------------------------

    @plain
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        done = [m for m in messages if isinstance(m, GazetteCommitMessage)]
        rows = sum(m.rows for m in done)
        size = sum(m.bytes for m in done)
        journals = {s[0] for m in done for s in m.spans}
        log.info(
            "gazette write committed: %d rows, %d bytes, %d spans in %d journal(s) from %d task(s)",
            rows,
            size,
            sum(len(m.spans) for m in done),
            len(journals),
            len(done),
        )
        acks = self._acknowledge(done) if self.options.transactional else []
        if self.options.persisted:
            self._wait_persisted([s for m in done for s in m.spans] + acks)

    def _wait_persisted(self, spans: list[tuple[str, int, int]]) -> None:
        """``commitWhen=persisted``: return once every span is persisted; raise naming what was lost."""
        for journal in sorted({s[0] for s in spans}):
            testing.rpc_hold("commit", journal, self.options.connection.address)
        with JournalClient(self.options.connection.client_config(task=True)) as client:
            lost = persisted.wait_all(client, spans)
        if lost:
            raise persisted.PersistedLostError(
                "the write failed: " + persisted.lost_error("them", lost) + "; the other rows of the write stay"
            )
        log.info("gazette write persisted: %d span(s) in the fragment store", len(spans))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:  # type: ignore[override]
        done = [m for m in messages if isinstance(m, GazetteCommitMessage)]
        what = "unacknowledged (invisible to read-committed readers)" if self.options.transactional else "visible"
        log.warning(
            "gazette write aborted: appends cannot be undone; %d rows (%d bytes) of %d finished task(s) stay %s",
            sum(m.rows for m in done),
            sum(m.bytes for m in done),
            len(done),
            what,
        )

    def _acknowledge(self, done: list[GazetteCommitMessage]) -> list[tuple[str, int, int]]:
        """Append one ACK_TXN message per (journal, producer): commits the chosen attempts.
        Returns the spans of the ACK appends.

        The client waits out a broker restart for ``broker.timeout`` as the tasks' clients do
        (the query's planning reached the address), rather than giving up after a few seconds
        with rows appended but not acknowledged."""
        last: dict[str, dict[str, int]] = defaultdict(dict)
        for m in done:
            for journal, producer, clock in m.transactions:
                last[journal][producer] = max(clock, last[journal].get(producer, 0))
        if not last:
            return []
        for journal in sorted(last):
            testing.rpc_hold("commit", journal, self.options.connection.address)
        spans = []
        head, tail = pointer_prefix(self.options.uuid_pointer)
        with JournalClient(self.options.connection.client_config(task=True)) as client:
            for journal, producers in sorted(last.items()):
                docs = []
                for producer, clock in sorted(producers.items()):
                    u = build_uuid(bytes.fromhex(producer), clock + TICK, Flags.ACK_TXN)
                    docs.append(f'{head}{u}","ack":true{tail[1:]}}}\n'.encode())
                frag = client.append(journal, b"".join(docs))
                log.info("acknowledged %d producer(s) in %s at %d", len(docs), journal, frag.begin)
                spans.append((journal, frag.begin, frag.end))
        return spans
