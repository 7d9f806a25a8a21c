"""Exactly-once streaming writes: ``df.writeStream.format("gazette")``.

Rows are routed, framed and encoded exactly as by the batch writer
(:mod:`pyspark_gazette.spark.write.batch`); what differs is how they reach the journal. A write
task learns its query and micro-batch from Spark's task-local properties
(``sql.streaming.queryId``, stable across restarts from one checkpoint, and
``streaming.sql.batchId``) and spools each journal's encoded rows to a temporary file in
Spark's local directory. Once its input is exhausted it appends each journal's file in
**one** Append RPC guarded by the journal's registers:

* the register name ``<key>`` is ``gzsink/<query id>/<partition id>`` (a valid label name;
  hashed if the query id were ever too long or unusual), its value the batch id;
* ``check_registers`` excludes ``<key>=<batch>`` (and the next :data:`FUTURE_WINDOW` batch
  ids, so a zombie attempt of an old batch cannot append after a newer batch did);
* ``union_registers`` sets ``<key>=<batch>``, replacing the previous batch's value.

Any later attempt at the same (query, batch, partition): a retried or speculative task, or
the re-run of the batch after a driver restart, then gets REGISTER_MISMATCH from the broker
and reports the journal as already written instead of appending again. The append and the
register update commit together, so there is no window in which one happened without the
other. Registers stay bounded: one label per (query, partition) per journal.

Assumptions and limits are in ``docs/exactly-once.md``: the re-run of a batch must route the
same rows to the same partition id; one task's rows for one journal go in one Append (it
streams from disk, but holds the journal's other writers for that time); registers travel
with every replicated transaction, so keep the partition count moderate.

Registers make a re-run safe, not the content durable: Gazette acknowledges an append held in
its replicas' spools, and can lose it if every one of them dies before persisting it. The
driver watches the spans its batches committed until they are persisted and fails the query,
naming the journal, offsets and batch, if one is lost (:mod:`pyspark_gazette.spark.write.watch`).
With ``commitWhen=persisted`` the commit instead waits until the batch's spans are persisted
(:mod:`pyspark_gazette.spark.write.persisted`); a loss fails the micro-batch after recording, in
the checkpoint directory, its lost and persisted partitions: the re-run appends the lost ones
under the register value ``<batch>.<n>`` and skips the persisted ones.

``transactional`` is not supported for streams (the registers already make the rows
exactly-once for every reader).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping
from typing import IO

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from pyspark_gazette import testing
from pyspark_gazette.client import JournalClient
from pyspark_gazette.errors import GazetteError, OptionError, RegisterMismatchError
from pyspark_gazette.protocol import label_set, pb
from pyspark_gazette.protocol.labels import LabelError, validate_label
from pyspark_gazette.spark.lineage import Read
from pyspark_gazette.spark.options import WriteOptions
from pyspark_gazette.spark.surface import plain
from pyspark_gazette.spark.write import persisted, watch
from pyspark_gazette.spark.write.batch import GazetteBatchWriter
from pyspark_gazette.spark.write.encode import Framed
from pyspark_gazette.spark.write.task import FAIL_ENV, WritePlan, WriteTask
from pyspark_gazette.testing import stream_hold as testing_hold

log = logging.getLogger(__name__)

#: Options Spark hands to every streaming sink, for itself (compared lower-case).
SPARK_SINK_KEYS = frozenset({"checkpointlocation"})
#: The gazette reads a sink's columns come from (:func:`pyspark_gazette.spark.lineage.marks`).
Reads = tuple[tuple[str, Read], ...]
#: Register names start with this.
KEY_PREFIX = "gzsink/"
#: How many batch ids after the current one the register check also refuses.
FUTURE_WINDOW = 64
#: How many re-run values (``<batch>.<n>``) of the current batch a register check also refuses.
LOST_WINDOW = 3
#: Seconds a process reuses the write plan it built for the same options and schema.
PLAN_TTL = 30.0
_plans: dict[tuple[WriteOptions, str, Reads], tuple[float, WritePlan]] = {}
_plans_lock = threading.Lock()


def stream_write_options(options: Mapping[str, str]) -> WriteOptions:
    """:class:`WriteOptions` of a stream: Spark's own sink options (the checkpoint) left out."""
    return WriteOptions.parse({k: v for k, v in options.items() if k.lower() not in SPARK_SINK_KEYS})


def spool_dir() -> str | None:
    """Spark's first local directory in an executor (``SPARK_LOCAL_DIRS``), else the default."""
    dirs = [d for d in os.environ.get("SPARK_LOCAL_DIRS", "").split(",") if d and os.path.isdir(d)]
    return dirs[0] if dirs else None


def stream_plan(options: WriteOptions, schema: StructType, reads: Reads = ()) -> WritePlan:
    """The batch writer's plan (schema and options checked, the journal option resolved), reused
    by this process for :data:`PLAN_TTL` seconds.

    Spark builds the stream writer again for every micro-batch, twice: on the driver to ship it
    to the tasks, and in the process that runs ``commit``. Each build used to resolve the journal
    option again (a new channel and a List RPC: 2-50 ms, twice per batch) although nothing in
    the plan changed. Spark reuses its Python workers, so from the second batch on the plan comes
    from here. Failures are not cached; a journal deleted within the TTL fails the batch's
    append instead, which names it.
    """
    key = (options, schema.json(), reads)
    now = time.monotonic()
    with _plans_lock:
        hit = _plans.get(key)
    if hit is not None and now - hit[0] < PLAN_TTL:
        return hit[1]
    plan = GazetteBatchWriter(options, schema, False, reads).plan  # streams never overwrite (refused earlier)
    with _plans_lock:
        _plans[key] = (now, plan)
    return plan


def register_key(query_id: str, partition: int) -> str:
    """The register name of one (query, partition): a valid Gazette label name."""
    key = f"{KEY_PREFIX}{query_id}/{partition}"
    try:
        validate_label(key, "0")
    except LabelError:
        digest = hashlib.sha256(query_id.encode()).hexdigest()[:40]
        key = f"{KEY_PREFIX}{digest}/{partition}"
    return key


def register_guard(
    key: str, batch: int, lost: int = 0, *, reruns: bool = False
) -> tuple[pb.LabelSelector, pb.LabelSet]:
    """(check_registers, union_registers) of an append of ``batch`` under ``key``.

    ``lost``: how many times ``commitWhen=persisted`` found this partition's append of ``batch``
    lost (:mod:`pyspark_gazette.spark.write.persisted`); the append then writes the value
    ``<batch>.<lost>``, which the lost append's ``<batch>`` does not refuse, and refuses itself
    and the next values of the batch, so a second attempt of the re-run does not append again.
    ``reruns`` (``commitWhen=persisted``): an append of ``batch`` also refuses those values."""
    later = [str(b) for b in range(batch + 1, batch + FUTURE_WINDOW + 1)]
    first = max(lost, 1)
    retries = [f"{batch}.{n}" for n in range(first, first + LOST_WINDOW)] if lost or reruns else []
    refused = ([] if lost else [str(batch)]) + retries + later
    check = pb.LabelSelector(exclude=label_set({key: refused}))
    return check, label_set({key: f"{batch}.{lost}" if lost else str(batch)})


@dataclasses.dataclass(frozen=True)
class StreamCommitMessage(WriterCommitMessage):
    """What one successful task attempt of a micro-batch did."""

    partition: int
    attempt: int
    batch: int
    #: ``(journal, begin, end)`` of the task's appends, one per journal.
    spans: tuple[tuple[str, int, int], ...]
    #: Journals this (query, batch, partition) had already written (found by its register).
    skipped: tuple[str, ...]
    rows: int
    bytes: int
    #: Spark's id of the streaming query (``sql.streaming.queryId``).
    query: str = ""


class StreamWriteTask(WriteTask):
    """One task attempt of one micro-batch: spool per journal, then one guarded Append each."""

    def __init__(
        self,
        plan: WritePlan,
        partition: int,
        attempt: int,
        key: str,
        batch: int,
        record: persisted.Record | None = None,
    ):
        super().__init__(plan, partition, attempt)
        self.key, self.batch = key, batch
        #: What ``commitWhen=persisted`` found of an earlier run of this batch (None: nothing lost).
        self.record = record
        self.spools: dict[str, IO[bytes]] = {}
        self.skipped: list[str] = []

    def run_stream(self, batches: Iterable[pa.RecordBatch]) -> list[tuple[str, int, int]]:
        """Spool every batch, then append each journal's rows; return the spans written."""
        self.client = JournalClient(self.opts.connection.client_config(task=True))
        try:
            for batch in batches:
                self._batch(batch)
            spans = [s for s in (self._commit(j) for j in sorted(self.spools)) if s is not None]
        finally:
            for f in self.spools.values():
                f.close()
            self.client.close()
        if self.fail_after and self.rows >= self.fail_after:
            raise RuntimeError(f"{FAIL_ENV}: injected failure after appending {self.rows} rows (first attempt)")
        return spans

    def _append(self, journal: str, content: Framed) -> None:
        """Spool whole messages (the batch writer would send them to its AppendService)."""
        data, _ = content
        spool = self.spools.get(journal)
        if spool is None:
            spool = self.spools[journal] = tempfile.TemporaryFile(prefix="gazette-sink-", dir=spool_dir())
        spool.write(data)
        self.bytes += len(data)

    def _commit(self, journal: str) -> tuple[str, int, int] | None:
        spool = self.spools[journal]
        spool.seek(0)
        lost = 0
        if self.record is not None:
            if self.partition in self.record.persisted.get(journal, ()):
                log.info(
                    "%s holds batch %d of partition %d, persisted (checked by an earlier run): not appending again",
                    journal,
                    self.batch,
                    self.partition,
                )
                self.skipped.append(journal)
                return None
            lost = self.record.lost.get(journal, {}).get(self.partition, 0)
            if lost:
                log.warning(
                    "%s lost batch %d of partition %d before persisting it: appending it again",
                    journal,
                    self.batch,
                    self.partition,
                )
        check, union = register_guard(self.key, self.batch, lost, reruns=self.opts.persisted)
        try:
            frag = self.client.append(journal, spool, check_registers=check, union_registers=union)
        except RegisterMismatchError as e:
            have = sorted(lb.value for lb in e.registers.labels if lb.name == self.key) if e.registers else []
            log.info(
                "%s already holds batch %d of partition %d (%s=%s): not appending again",
                journal,
                self.batch,
                self.partition,
                self.key,
                ",".join(have),
            )
            self.skipped.append(journal)
            return None
        return (journal, frag.begin, frag.end)


class GazetteStreamWriter(DataSourceStreamArrowWriter):
    """The exactly-once streaming sink; see the module docstring."""

    def __init__(
        self,
        options: WriteOptions,
        schema: StructType,
        overwrite: bool,
        reads: Reads = (),
        checkpoint: str | None = None,
    ):
        if options.transactional:
            raise OptionError(
                "transactional", "is for batch writes; streaming writes are exactly-once through journal registers"
            )
        if overwrite:
            raise GazetteError(
                "Gazette journals are append-only: outputMode('complete') cannot replace their content; "
                "use outputMode('append') or 'update'"
            )
        #: commitWhen=persisted: the checkpoint directory, and what it records of lost batches.
        self.records_dir = persisted.checkpoint_dir(checkpoint) if options.persisted else None
        self.plan = stream_plan(options, schema, reads)
        self.options = options
        self.records = persisted.load_records(self.records_dir) if self.records_dir else {}

    def __repr__(self) -> str:
        return f"GazetteStreamWriter(journal={self.options.journal!r})"

    # -- executors -------------------------------------------------------------------------

    @plain
    def write(self, iterator):  # type: ignore[no-untyped-def]  # Iterator[pa.RecordBatch]
        from pyspark import TaskContext

        ctx = TaskContext.get()
        query = ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None
        batch_text = ctx.getLocalProperty("streaming.sql.batchId") if ctx is not None else None
        if ctx is None or not query or batch_text is None:
            raise GazetteError("a streaming write task needs Spark's sql.streaming.queryId and streaming.sql.batchId")
        partition, attempt, batch = ctx.partitionId(), ctx.attemptNumber(), int(batch_text)
        if partition == 0:
            testing_hold("task-start", batch, ctx)
        task = StreamWriteTask(
            self.plan, partition, attempt, register_key(query, partition), batch, self.records.get(batch)
        )
        spans = task.run_stream(iterator)
        if partition == 0:
            testing_hold("task-end", batch, ctx)
        return StreamCommitMessage(
            partition, attempt, batch, tuple(spans), tuple(task.skipped), task.rows, task.bytes, query
        )

    # -- driver ----------------------------------------------------------------------------

    @plain
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]  # noqa: N803
        testing_hold("commit-start", batchId)
        done = [m for m in messages if isinstance(m, StreamCommitMessage)]
        log.info(
            "gazette stream batch %d committed: %d rows, %d bytes appended in %d append(s) from %d task(s); "
            "%d journal write(s) found already done",
            batchId,
            sum(m.rows for m in done),
            sum(end - begin for m in done for _, begin, end in m.spans),
            sum(len(m.spans) for m in done),
            len(done),
            sum(len(m.skipped) for m in done),
        )
        spans = [(m.partition, *span) for m in done for span in m.spans]
        for journal in sorted({j for _, j, _, _ in spans}):
            testing.rpc_hold("commit", journal, self.options.connection.address)
        if self.records_dir is not None:
            self._wait_persisted(batchId, spans)
        elif done:  # raises if Gazette lost what an earlier micro-batch committed
            watch.commit(self.options.connection, done[0].query, batchId, spans)
        testing_hold("commit-end", batchId)

    def _wait_persisted(self, batch: int, spans: list[tuple[int, str, int, int]]) -> None:
        """``commitWhen=persisted``: return once the batch's appends are persisted. When some are
        lost, record which partitions were lost and which persisted (in the checkpoint
        directory, for the batch's re-run) and raise :class:`~.watch.CommittedDataLost`."""
        assert self.records_dir is not None
        lost = persisted.wait_all(watch.client(self.options.connection), [s[1:] for s in spans])
        if not lost:
            log.info("gazette stream batch %d persisted: %d append(s)", batch, len(spans))
            return
        record = persisted.load_records(self.records_dir).get(batch) or persisted.Record()
        again: list[str] = []
        for partition, journal, begin, end in spans:
            if any(b < end and begin < e for b, e in lost.get(journal, [])):
                times = record.lost.setdefault(journal, {})
                times[partition] = times.get(partition, 0) + 1
                record.persisted.get(journal, set()).discard(partition)
                again.append(f"partition {partition} ({journal}, offsets {begin}-{end})")
            else:
                record.persisted.setdefault(journal, set()).add(partition)
        persisted.save_record(self.records_dir, batch, record)
        raise watch.CommittedDataLost(
            f"micro-batch {batch} is not committed: "
            + persisted.lost_error("its appends", lost)
            + (
                f". Started again from its checkpoint, the query re-runs micro-batch {batch} and appends "
                + ", ".join(again)
                + " once more; its persisted partitions are not appended again"
                if again
                else ""
            )
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # type: ignore[override]  # noqa: N803
        done = [m for m in messages if isinstance(m, StreamCommitMessage)]
        log.warning(
            "gazette stream batch %d aborted: %d append(s) of %d finished task(s) stay in the journals; "
            "the batch's re-run will find them by their registers and not append them again",
            batchId,
            sum(len(m.spans) for m in done),
            len(done),
        )
