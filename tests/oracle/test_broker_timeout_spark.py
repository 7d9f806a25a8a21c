"""broker.timeout through Spark: a cluster that never comes back fails the query with an error
naming the option, instead of waiting forever (the client-level cases are in
tests/integration/test_broker_timeout.py). On the embedded broker and on a real Gazette cluster,
each stopped for good by the test."""

from __future__ import annotations

import pytest
from pyspark.errors import StreamingQueryException
from spark_helpers import events, ndjson

from journalspecs import make_spec

J = "timeout/events"
TIMEOUT = "4s"


class Doomed:
    """A broker (or cluster) with one journal of 40 messages, and ``kill()`` to lose it for good."""

    def __init__(self, address: str, store_root: str, kill):
        self.address, self.store_root, self.kill = address, store_root, kill


@pytest.fixture(params=["embedded", "gazette"])
def doomed(request, tmp_path):
    from pyspark_gazette.client import Change, JournalClient

    if request.param == "embedded":
        from pyspark_gazette.broker import EmbeddedBroker

        store = str(tmp_path / "store")
        with EmbeddedBroker(str(tmp_path / "broker"), file_root=store) as b:
            with JournalClient(b.address) as c:
                c.apply([Change(expect_mod_revision=0, upsert=make_spec(J))])
                c.append(J, ndjson(events(40)))
            yield Doomed(b.address, store, lambda: b.stop(grace=0))
        return
    import realgazette

    realgazette.require()
    with realgazette.GazetteCluster(tmp_path / "gazette", 1) as cluster:
        cluster.apply_specs([make_spec(J)])
        with cluster.client() as c:
            c.append(J, ndjson(events(40)))

        def kill() -> None:
            for b in cluster.brokers:
                b.kill()

        yield Doomed(cluster.address, cluster.file_root, kill)


@pytest.mark.timeout(300)
def test_a_stream_fails_naming_broker_timeout_when_the_cluster_is_gone(spark, doomed, tmp_path):
    seen: list[int] = []
    df = (
        spark.readStream.format("gazette")
        .option("broker.address", doomed.address)
        .option("store.fileRoot", doomed.store_root)
        .option("journals", J)
        .option("startingOffsets", "earliest")
        .option("broker.timeout", TIMEOUT)
        .load()
    )
    q = (
        df.writeStream.foreachBatch(lambda batch, _: seen.append(batch.count()))
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .start()
    )
    try:
        q.processAllAvailable()
        assert sum(seen) == 40
        doomed.kill()
        with pytest.raises(StreamingQueryException, match="BrokerTimeoutError: .*more than broker.timeout"):
            q.awaitTermination(240)  # raises the query's error; returns False if it is still waiting
    finally:
        q.stop()


@pytest.mark.timeout(300)
def test_a_write_fails_naming_broker_timeout_when_the_cluster_is_gone(spark, doomed):
    df = spark.range(0, 100, 1, 2).selectExpr("id")
    w = df.write.format("gazette").mode("append").option("broker.address", doomed.address).option("journal", J)
    w.option("broker.timeout", TIMEOUT).save()  # the journal's spec is resolved at planning
    doomed.kill()
    # Planning resolves the journal on the driver: no broker answers, and the error names the address.
    with pytest.raises(
        Exception, match=f"nothing answered at broker.address '{doomed.address}' \\(List of journal '{J}': "
    ):
        w.save()


@pytest.mark.timeout(300)
def test_a_write_task_fails_naming_broker_timeout_when_the_cluster_is_gone(spark, doomed):
    """Journals from a column are resolved and appended in the tasks, which give up after
    broker.timeout without a broker."""
    df = spark.range(0, 100, 1, 2).selectExpr(f"'{J}' as journal", "id")
    w = df.write.format("gazette").mode("append").option("broker.address", doomed.address)
    w = w.option("broker.timeout", TIMEOUT)
    doomed.kill()
    with pytest.raises(Exception, match=f"'{J}'.*(broker.timeout|UNAVAILABLE)"):
        w.save()
