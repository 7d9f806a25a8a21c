"""Holes judged by age (client/settle.py), as Gazette's brokers judge them: a hole whose next
fragment was persisted less than ``holeAgeThreshold`` ago (6 hours by default) may be a
fragment whose upload is still in flight after a broker hand-off. Reads never skip it and never
call it data loss: a batch read waits for it (up to ``broker.timeout``, then HoleInFlightError),
a stream reads up to it and waits there without committing past it.

The in-flight upload is made on the embedded broker with a file store and a journal of four
fragments (12,000 rows; the last one the open spool): the second fragment's file is moved aside
and the broker re-lists the store (its index drops it; its refresh interval is an hour, so
nothing else re-lists), then the file is put back once the planner says it waits on exactly that
hole (testing.arm_settle_wait's marker): the upload "lands" while the read runs.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from spark_helpers import fill, reader

from pyspark_gazette import testing
from pyspark_gazette.fragments import FragmentRef

ROWS = 3000  # per append: four appends, four fragments, 12,000 rows


class Hole:
    """A journal whose second fragment is in flight: its file is aside until :meth:`land`."""

    def __init__(self, client, broker, create_journal):
        self.broker = broker
        self.journal = f"age/j-{uuid.uuid4().hex[:8]}"
        # The embedded broker re-lists the store only when told; real Gazette every second.
        embedded = getattr(broker, "kind", "embedded") != "gazette"
        create_journal(self.journal, length=1024, **({"refresh_seconds": 3600} if embedded else {}))
        self.expected = [o for o, _ in fill(client, broker, self.journal, batches=4, per_batch=ROWS)]
        listed = client.list_fragments(self.journal)
        assert len(listed) == 4 and listed[2].spec.mod_time  # the fragment after the hole is persisted
        self.mid = FragmentRef.from_proto(listed[1].spec)
        self.path = os.path.join(broker.store_root, "store", self.mid.content_path)
        os.rename(self.path, self.path + ".aside")
        broker.refresh(self.journal)
        assert (self.mid.begin, self.mid.end) not in [
            (f.spec.begin, f.spec.end) for f in client.list_fragments(self.journal)
        ]
        self.marker = testing.arm_settle_wait(self.journal)

    @property
    def span(self) -> str:
        return f"[{self.mid.begin}, {self.mid.end})"

    def land(self) -> None:
        """The upload lands: the store holds the fragment (no broker lists it yet)."""
        os.rename(self.path + ".aside", self.path)

    def outside(self, start: int = 0) -> list[int]:
        return [o for o in self.expected if o >= start and not self.mid.begin <= o < self.mid.end]

    def close(self) -> None:
        testing.disarm_settle_wait(self.journal)


@pytest.fixture
def hole(client, broker, create_journal):
    h = Hole(client, broker, create_journal)
    try:
        yield h
    finally:
        h.close()


def _wait_marker(marker: str, alive, timeout: float = 300) -> str:
    deadline = time.monotonic() + timeout
    while not os.path.exists(marker):  # written by a Spark Python worker: no event to share
        assert alive(), "the read ended without waiting on the hole"
        assert time.monotonic() < deadline, "planning never waited on the hole"
        time.sleep(0.05)
    with open(marker) as f:
        return f.read()


def _in_thread(fn):
    out: dict = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


@pytest.mark.parametrize("fail", ["true", "false"])
def test_a_batch_read_waits_for_a_fragment_in_flight_and_returns_every_row(spark, broker, hole, fail):
    _batch_waits(spark, broker, hole, fail)


@pytest.mark.parametrize("broker", ["gazette"], indirect=True)
def test_a_batch_read_waits_for_a_fragment_in_flight_under_real_gazette(spark, broker, hole):
    """The same on a real Gazette v0.103.0 cluster persisting to a file store: its brokers re-list
    the store every second, drop the fragment while its file is aside and list it again once it
    lands."""
    _batch_waits(spark, broker, hole, "true")


def _batch_waits(spark, broker, hole, fail: str) -> None:
    h = hole
    t, out = _in_thread(
        lambda: reader(spark, broker, journals=h.journal, failOnDataLoss=fail, directReads="false").load().collect()
    )
    text = _wait_marker(h.marker, t.is_alive)
    assert h.span in text  # the planner waits on exactly that hole
    h.land()
    t.join(300)
    assert not t.is_alive() and "error" not in out, out.get("error")
    assert sorted(r.offset for r in out["value"]) == h.expected  # 12,000 rows: nothing skipped
    assert len(h.expected) == 4 * ROWS


def test_a_read_starting_after_a_fragment_in_flight_does_not_wait_for_it(spark, broker, hole):
    h = hole
    after = json.dumps({h.journal: h.mid.end})
    rows = reader(spark, broker, journals=h.journal, startingOffsets=after).load().collect()
    assert sorted(r.offset for r in rows) == h.outside(h.mid.end)
    assert not os.path.exists(h.marker)


def test_a_batch_read_fails_with_hole_in_flight_at_broker_timeout(spark, broker, hole):
    h = hole
    r = reader(spark, broker, journals=h.journal, failOnDataLoss="false").option("broker.timeout", "3s")
    with pytest.raises((PySparkException, Py4JJavaError)) as ei:
        r.load().collect()
    text = str(ei.value)
    assert "HoleInFlightError" in text and "DataLossError" not in text, text[:2000]
    assert f"journal {h.journal!r}: offsets {h.span} are still in no fragment after waiting 3s" in text, text[:2000]
    assert "may still be in flight" in text and "holeAgeThreshold" in text


@pytest.mark.parametrize("fail", [True, False])
def test_a_hole_older_than_the_threshold_is_data_loss_at_once(spark, broker, hole, fail):
    """``holeAgeThreshold=0s``: the fragment after the hole is old enough, the hole is lost."""
    h = hole
    r = reader(spark, broker, journals=h.journal, holeAgeThreshold="0s", failOnDataLoss=str(fail).lower())
    if fail:
        with pytest.raises((PySparkException, Py4JJavaError)) as ei:
            r.load().collect()
        assert "DataLossError" in str(ei.value) and h.journal in str(ei.value) and h.span in str(ei.value)
    else:
        assert sorted(x.offset for x in r.load().collect()) == h.outside()
    assert not os.path.exists(h.marker)  # judged at once, never waited on


def _await_rows(spark, q, name: str, n: int, timeout: float = 300) -> None:
    """Until the query's memory table holds ``n`` rows (the query still running)."""
    deadline = time.monotonic() + timeout
    while spark.sql(f"SELECT count(*) AS n FROM {name}").collect()[0].n < n:
        assert q.isActive, q.exception()
        assert time.monotonic() < deadline, f"the stream did not reach {n} rows"
        time.sleep(0.2)


def _offsets_logged(checkpoint: str, journal: str) -> list[int]:
    """The journal's end offset in every micro-batch the query has logged (planned) so far."""
    out = []
    folder = os.path.join(checkpoint, "offsets")
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        if name.isdigit():
            with open(os.path.join(folder, name)) as f:
                source = json.loads(f.read().splitlines()[-1])
            entry = source[journal]
            out.append(entry["offset"] if isinstance(entry, dict) else entry)
    return out


def test_an_available_now_stream_waits_at_a_fragment_in_flight_without_committing_past_it(
    spark, broker, hole, tmp_path
):
    h = hole
    name = "age_" + uuid.uuid4().hex[:8]
    checkpoint = str(tmp_path / name)
    df = (
        spark.readStream.format("gazette")
        .option("broker.address", broker.address)
        .option("store.fileRoot", broker.store_root)
        .option("journals", h.journal)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", "false")
        .load()
    )
    q = (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    try:
        text = _wait_marker(h.marker, lambda: q.isActive)
        assert h.span in text
        _await_rows(spark, q, name, len([o for o in h.expected if o < h.mid.begin]))  # read up to the hole
        planned = _offsets_logged(checkpoint, h.journal)
        assert max(planned) == h.mid.begin, planned  # and nothing planned past it
        assert q.isActive  # waiting at the hole, not ended short of its target
        h.land()
        q.awaitTermination(300)
    finally:
        q.stop()
    assert q.exception() is None, q.exception()
    got = sorted(r.offset for r in spark.sql(f"SELECT offset FROM {name}").collect())
    assert got == h.expected  # every row, once


def test_a_running_stream_reads_up_to_a_fragment_in_flight_then_on_once_it_lands(spark, broker, hole, tmp_path):
    """A query that runs on (a processing-time trigger) reads up to the hole, waits there trigger
    after trigger without failing (a WARNING once), and reads the rest once the fragment lands."""
    h = hole
    name = "age_" + uuid.uuid4().hex[:8]
    checkpoint = str(tmp_path / name)
    df = (
        spark.readStream.format("gazette")
        .option("broker.address", broker.address)
        .option("store.fileRoot", broker.store_root)
        .option("journals", h.journal)
        .option("startingOffsets", "earliest")
        .load()
    )
    q = (
        df.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        _wait_marker(h.marker, lambda: q.isActive)
        _await_rows(spark, q, name, len([o for o in h.expected if o < h.mid.begin]))  # read up to the hole
        assert max(_offsets_logged(checkpoint, h.journal)) == h.mid.begin  # and nothing planned past it
        h.land()
        _await_rows(spark, q, name, len(h.expected))
        assert q.isActive and q.exception() is None, q.exception()
    finally:
        q.stop()
    got = sorted(r.offset for r in spark.sql(f"SELECT offset FROM {name}").collect())
    assert got == h.expected
