"""readStream with readCommitted=true: transactions across micro-batch boundaries (local[2] Spark).

Test data is ndjson with Gazette message UUIDs from :class:`TransactionalPublisher`. Each test
knows, for every message it appends, which message commits it (itself for OUTSIDE_TXN and
UUID-less messages, the producer's ACK for transaction members, nothing when rolled back,
pending or a duplicate); a micro-batch ``[S, E)`` must emit exactly the messages whose
committing message begins in it. The batch ranges come from the query's progress reports.
"""

from __future__ import annotations

import collections
import json
import logging
import uuid

import pytest
from spark_helpers import reader

from pyspark_gazette.message import Flags, TransactionalPublisher, build_uuid, set_uuid_at
from pyspark_gazette.spark.read.committed import offset_of, state_of

J = "rc/stream"


class Script:
    """Appends tagged ndjson messages and records each one's offset and committing message."""

    def __init__(self, client, journal: str = J):
        self.client, self.journal = client, journal
        self.offset: dict[str, int] = {}
        self.committer: dict[str, str] = {}  # tag -> tag of the message committing it
        self._open: dict[bytes, list[str]] = collections.defaultdict(list)

    def append(self, *messages: tuple[str, uuid.UUID | None]) -> None:
        """``(tag, uuid or None)`` messages in one Append; commits follow each UUID's flags."""
        lines = []
        for tag, u in messages:
            doc: dict = {"v": tag}
            if u is not None:
                set_uuid_at(doc, u)
            lines.append(json.dumps(doc, separators=(",", ":")).encode() + b"\n")
        pos = self.client.append(self.journal, b"".join(lines)).begin
        for (tag, _), line in zip(messages, lines, strict=True):
            self.offset[tag] = pos
            pos += len(line)

    def commits(self, tag: str, committer: str | None = None) -> None:
        """Declare that ``committer`` (default: the message itself) commits ``tag``."""
        self.committer[tag] = committer or tag

    def expected(self, start: int, end: int) -> set[str]:
        return {t for t, c in self.committer.items() if start <= self.offset[c] < end}


def stream(spark, broker, **options):
    r = spark.readStream.format("gazette").option("broker.address", broker.address)
    r = r.option("store.fileRoot", broker.store_root).option("readCommitted", "true")
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def run_batches(df, checkpoint) -> tuple[dict[int, list[str]], dict[int, tuple[int, int]]]:
    """Run ``df`` with Trigger.AvailableNow: the tags each batch id emitted, and its ``[S, E)``.

    Each batch is written as text under ``checkpoint.out/<batch id>`` (a re-run overwrites it).
    """
    out = checkpoint.with_suffix(".out")

    def sink(batch, batch_id):
        batch.select("value").write.mode("overwrite").text(str(out / str(batch_id)))

    q = df.writeStream.foreachBatch(sink).option("checkpointLocation", str(checkpoint))
    q = q.trigger(availableNow=True).start()
    q.awaitTermination()
    assert q.exception() is None, q.exception()
    ranges = {}
    for p in q.recentProgress:
        src = p.sources[0]
        start = json.loads(src.startOffset) if src.startOffset else None
        ranges[p.batchId] = (offset_of((start or {}).get(J, 0)), offset_of(json.loads(src.endOffset)[J]))
        # The write heads the source reports (AvailableNow's target, which the last batch
        # reaches); none for a batch re-run from the offsets log.
        latest = json.loads(src.latestOffset) if src.latestOffset else None
        assert latest is None or latest[J] >= ranges[p.batchId][1]
    last = json.loads(q.recentProgress[-1].sources[0].latestOffset or "null") if ranges else None
    assert last is None or last[J] == ranges[max(ranges)][1]
    got = {
        b: [json.loads(line)["v"] for f in sorted((out / str(b)).glob("part-*")) for line in f.read_text().splitlines()]
        for b in ranges
    }
    return got, ranges


def batch_of(ranges: dict[int, tuple[int, int]], offset: int) -> int:
    return next(b for b, (s, e) in ranges.items() if s <= offset < e)


def uuids(pub: TransactionalPublisher, n: int) -> list[uuid.UUID]:
    return [pub.uncommitted() for _ in range(n)]


@pytest.mark.both_brokers
def test_transactions_across_batch_boundaries_commit_once_at_their_ack(spark, broker, client, create_journal, tmp_path):
    create_journal(J, length=1024)
    a, b, c, d = (TransactionalPublisher() for _ in range(4))
    s = Script(client)
    # A: a transaction spread over many small batches, committed by ack-a.
    a_uuids = uuids(a, 3)
    s.append(("a0", a_uuids[0]), ("o0", b.committed()), ("plain0", None))
    s.append(("a1", a_uuids[1]), ("o1", b.committed()), ("c-pre", c.uncommitted()))
    ack_c1 = c.ack()
    s.append(("ack-c1", ack_c1), ("d0", d.uncommitted()), ("a2", a_uuids[2]))
    # C: a re-sent ACK (same clock as its last ACK) rolls back c0 and c1; c2 commits later.
    s.append(("c0", c.uncommitted()), ("c1", c.uncommitted()), ("o2", b.committed()))
    s.append(("ack-c1-again", ack_c1), ("ack-a", a.ack()))
    # Re-sent copies after the ACKs: a duplicate transaction member and a duplicate OUTSIDE message.
    o2_again = build_uuid(b.producer, b.clock, Flags.OUTSIDE_TXN)
    s.append(("a1-again", a_uuids[1]), ("o2-again", o2_again), ("c2", c.uncommitted()))
    s.append(("d1", d.uncommitted()), ("ack-c2", c.ack()), ("plain1", None))
    for t in ("a0", "a1", "a2"):
        s.commits(t, "ack-a")
    s.commits("c-pre", "ack-c1")
    s.commits("c2", "ack-c2")
    for t in ("o0", "o1", "o2", "plain0", "plain1"):
        s.commits(t)
    # Rolled back (c0, c1), pending (d0, d1), duplicates and ACKs: never emitted.

    df = stream(spark, broker, journals=J, startingOffsets="earliest", maxBytesPerTrigger="150")
    got, ranges = run_batches(df, tmp_path / "ckpt")

    assert batch_of(ranges, s.offset["ack-a"]) - batch_of(ranges, s.offset["a0"]) >= 3  # open over 3+ boundaries
    for batch_id, (start, end) in ranges.items():
        assert sorted(got.get(batch_id, [])) == sorted(s.expected(start, end)), (batch_id, start, end)
    emitted = collections.Counter(t for tags in got.values() for t in tags)
    assert emitted == collections.Counter(s.committer.keys())  # each exactly once
    batch_rows = reader(spark, broker, journals=J, readCommitted="true").load().collect()
    assert collections.Counter(json.loads(r.value)["v"] for r in batch_rows) == emitted


def test_processing_time_emits_a_transaction_only_after_its_ack(spark, broker, client, create_journal, tmp_path):
    create_journal(J)
    a, b = TransactionalPublisher(), TransactionalPublisher()
    s = Script(client)
    df = stream(spark, broker, journals=J, startingOffsets="earliest", maxBytesPerTrigger="120")
    q = (
        df.writeStream.format("memory")
        .queryName("rc_live")
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )

    def tags():
        return sorted(json.loads(r.value)["v"] for r in spark.sql("SELECT value FROM rc_live").collect())

    try:
        s.append(("a0", a.uncommitted()), ("o0", b.committed()), ("a1", a.uncommitted()))
        q.processAllAvailable()
        assert tags() == ["o0"]
        s.append(("o1", b.committed()), ("a2", a.uncommitted()))
        q.processAllAvailable()
        assert tags() == ["o0", "o1"]
        s.append(("ack-a", a.ack()), ("o2", b.committed()))
        q.processAllAvailable()
        assert tags() == ["a0", "a1", "a2", "o0", "o1", "o2"]
    finally:
        q.stop()
    assert q.exception() is None


@pytest.mark.both_brokers
def test_restart_from_the_checkpoint_inside_an_open_transaction(spark, broker, client, create_journal, tmp_path):
    create_journal(J, length=1024)
    a, b = TransactionalPublisher(), TransactionalPublisher()
    s = Script(client)
    s.append(("a0", a.uncommitted()), ("o0", b.committed()))
    s.append(("a1", a.uncommitted()), ("o1", b.committed()))
    ckpt = tmp_path / "ckpt"
    df = stream(spark, broker, journals=J, startingOffsets="earliest", maxBytesPerTrigger="120")
    first, _ = run_batches(df, ckpt)
    assert sorted(t for tags in first.values() for t in tags) == ["o0", "o1"]  # the query ends mid-transaction

    s.append(("a2", a.uncommitted()), ("o2", b.committed()), ("ack-a", a.ack()), ("o3", b.committed()))
    second, ranges = run_batches(df, ckpt)
    assert not set(first) & set(second)
    assert sorted(t for tags in second.values() for t in tags) == ["a0", "a1", "a2", "o2", "o3"]

    # Lose the commit of the batch holding the ACK and everything after it: the restarted query
    # re-runs that batch from its logged offsets and must emit the same rows again.
    ack_batch = batch_of(ranges, s.offset["ack-a"])
    for k in range(ack_batch, max(second) + 1):
        for log in ("commits", "offsets") if k > ack_batch else ("commits",):
            for name in (str(k), f".{k}.crc"):
                (ckpt / log / name).unlink(missing_ok=True)
    third, _ = run_batches(df, ckpt)
    assert third[ack_batch] == second[ack_batch]
    assert sorted(t for k, tags in third.items() for t in tags) == sorted(
        t for k, tags in second.items() if k >= ack_batch for t in tags
    )


def logged_offsets(checkpoint) -> dict[int, dict]:
    """The source's offset of each batch in the checkpoint's offsets log."""
    return {int(f.name): json.loads(f.read_text().splitlines()[2]) for f in (checkpoint / "offsets").glob("[0-9]*")}


@pytest.mark.both_brokers
def test_a_transaction_longer_than_the_lookback_is_read_whole_across_batches(
    spark, broker, client, create_journal, tmp_path, caplog
):
    create_journal(J, length=1024)
    a, b = TransactionalPublisher(), TransactionalPublisher()
    s = Script(client)
    s.append(("a0", a.uncommitted()))
    s.append(*[(f"o{i}", b.committed()) for i in range(8)])  # about 600 bytes
    s.append(("a1", a.uncommitted()), ("ack-a", a.ack()))
    for t in ("a0", "a1"):
        s.commits(t, "ack-a")
    for i in range(8):
        s.commits(f"o{i}")
    # The lookback would not reach a0 from the ACK's batch; the offsets' state makes it irrelevant.
    df = stream(
        spark,
        broker,
        journals=J,
        startingOffsets="earliest",
        maxBytesPerTrigger="150",
        readCommittedLookbackBytes="300",
    )
    ckpt = tmp_path / "ckpt"
    with caplog.at_level(logging.WARNING, logger="pyspark_gazette.spark.read.committed"):
        got, ranges = run_batches(df, ckpt)
    start, _ = ranges[batch_of(ranges, s.offset["ack-a"])]
    assert s.offset["a0"] < start - 300
    for batch_id, (lo, hi) in ranges.items():
        assert sorted(got.get(batch_id, [])) == sorted(s.expected(lo, hi)), (batch_id, lo, hi)
    assert sorted(t for tags in got.values() for t in tags) == sorted(s.committer)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    # Each logged offset between a0 and the ACK records a's transaction open from a0.
    producer = a.producer.hex()
    for batch_id, offset in logged_offsets(ckpt).items():
        e = offset_of(offset[J])
        st = {p: (ack, begin) for p, ack, begin in state_of(offset[J], J)}
        if s.offset["a0"] < e <= s.offset["ack-a"]:
            assert st[producer][1] == s.offset["a0"], (batch_id, offset)
        elif e > s.offset["ack-a"]:
            assert st[producer][1] == -1, (batch_id, offset)


def downgrade(checkpoint) -> None:
    """Rewrite the checkpoint's offsets log as a version without read-committed state wrote it."""
    for f in (checkpoint / "offsets").glob("[0-9]*"):
        head, meta, src = f.read_text().splitlines()
        old = {j: offset_of(v) for j, v in json.loads(src).items()}
        f.write_text("\n".join([head, meta, json.dumps(old)]))
        (checkpoint / "offsets" / f".{f.name}.crc").unlink(missing_ok=True)


@pytest.mark.both_brokers
def test_an_old_checkpoint_without_state_is_upgraded_in_an_open_transaction(
    spark, broker, client, create_journal, tmp_path
):
    create_journal(J, length=1024)
    a, b = TransactionalPublisher(), TransactionalPublisher()
    s = Script(client)
    s.append(("a0", a.uncommitted()), ("o0", b.committed()))
    s.append(("a1", a.uncommitted()), ("o1", b.committed()))
    ckpt = tmp_path / "ckpt"
    df = stream(spark, broker, journals=J, startingOffsets="earliest", maxBytesPerTrigger="120")
    first, _ = run_batches(df, ckpt)
    assert sorted(t for tags in first.values() for t in tags) == ["o0", "o1"]  # stopped mid-transaction
    downgrade(ckpt)
    assert all(isinstance(o[J], int) for o in logged_offsets(ckpt).values())

    s.append(("a2", a.uncommitted()), ("o2", b.committed()), ("ack-a", a.ack()), ("o3", b.committed()))
    second, _ = run_batches(df, ckpt)
    # The first batch after the upgrade rebuilds the state from readCommittedLookbackBytes (64m)
    # before its start, which reaches a0; the offsets it logs carry state again.
    assert sorted(t for tags in second.values() for t in tags) == ["a0", "a1", "a2", "o2", "o3"]
    new = {k: o for k, o in logged_offsets(ckpt).items() if k >= min(second)}
    assert new and all(state_of(o[J], J) is not None for o in new.values())


def test_an_old_offset_with_a_short_lookback_warns_of_a_lost_transaction_start(
    spark, broker, client, create_journal, tmp_path, caplog
):
    from pyspark_gazette.spark.options import ReadOptions
    from pyspark_gazette.spark.read.stream import GazetteStreamReader
    from pyspark_gazette.spark.source import untyped_schema

    create_journal(J, length=1024)
    a, b = TransactionalPublisher(), TransactionalPublisher()
    s = Script(client)
    s.append(("a0", a.uncommitted()))
    s.append(*[(f"o{i}", b.committed()) for i in range(8)])  # about 600 bytes
    s.append(("a1", a.uncommitted()), ("ack-a", a.ack()))
    options = {
        "broker.address": broker.address,
        "store.fileRoot": broker.store_root,
        "journals": J,
        "readCommitted": "true",
        "readCommittedLookbackBytes": "300",
    }
    reader = GazetteStreamReader(ReadOptions.parse(options, streaming=True, env={}), untyped_schema(True, False))
    start, end = s.offset["ack-a"] - 100, client.append(J, b"").begin  # a zero-byte append: the write head
    # An offset without state (an old checkpoint's) is rebuilt from the 300-byte window: a0 lies
    # before it and is lost, as documented; a1 is emitted, and a warning says so.
    with caplog.at_level(logging.WARNING, logger="pyspark_gazette.spark.read.committed"):
        rows = [v for part in reader.partitions({J: start}, {J: end}) for rb in reader.read(part) for v in rb["value"]]
    tags = sorted(json.loads(v.as_py())["v"] for v in rows)
    assert s.offset["a0"] < start - 300 <= s.offset["a1"] and "a1" in tags and "a0" not in tags
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1, warned
    for part in (repr(J), a.producer.hex(), f"ACK at offset {s.offset['ack-a']}", f"starts at offset {start - 300}"):
        assert part in warned[0]
    assert "readCommittedLookbackBytes=300" in warned[0]


@pytest.mark.parametrize("value", ["0", "-1", "lots"])
def test_an_invalid_lookback_fails_naming_the_option(spark, broker, create_journal, value):
    create_journal(J)
    with pytest.raises(Exception) as ei:
        stream(spark, broker, journals=J, readCommittedLookbackBytes=value)
    assert "readCommittedLookbackBytes" in str(ei.value)
