"""The data source through Spark Connect, as Databricks serverless uses it (issue #6).

A real Spark Connect server runs in a child process (``connect_server.py``, one JVM for the
module); the tests are its client, ``SparkSession.builder.remote("sc://127.0.0.1:<port>")``.
The data source itself runs in the server's Python workers, which have the project installed;
the embedded broker runs in the test process and both sides reach it over loopback gRPC.
Server and test share one machine, so ``store.fileRoot`` and checkpoint paths mean the same on
both sides (docs/spark-connect.md says what changes when they do not).

Each test gets its own Connect session (sessions are cheap, the server is not), so a data source
registered by one test is not visible to the next.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest
from connect_server import ConnectServer
from spark_helpers import events, fill, ndjson
from test_stream_sink import journal_rows, multiset, registers

from pyspark_gazette.message import NDJSON

TYPED = "id LONG, country STRING, amount DOUBLE"
NO_OPTIONS = "# filled by test_options_come_from_the_server_side\n"


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("connect-server")
    # The server's options file (PYSPARK_GAZETTE_CONF), empty unless a test fills it.
    conf = workdir / "gazette.properties"
    conf.write_text(NO_OPTIONS)
    server = ConnectServer(workdir, env={"PYSPARK_GAZETTE_CONF": str(conf)}).start()
    server.options_file = conf
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def connect_mode(connect_server):
    """Connect client mode for this module only.

    A remote session marks the whole process as a Connect client
    (``SPARK_CONNECT_MODE_ENABLED``, which pyspark.sql.functions and the builder consult), and
    nothing unsets it. Other modules use a classic local[2] session in this same process, so the
    mark is removed again when the module ends.
    """
    before = os.environ.get("SPARK_CONNECT_MODE_ENABLED")
    yield connect_server.url
    if before is None:
        os.environ.pop("SPARK_CONNECT_MODE_ENABLED", None)
    else:
        os.environ["SPARK_CONNECT_MODE_ENABLED"] = before


@pytest.fixture
def remote(connect_mode):
    """A fresh Connect session. ``create()``, not ``getOrCreate()``: the latter refuses to make a
    remote session in a process that already holds a classic SparkContext (other modules')."""
    from pyspark.sql import SparkSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession

    session = SparkSession.builder.remote(connect_mode).create()
    assert isinstance(session, ConnectSession)
    yield session
    session.stop()


def reader(session, broker, **options):
    r = session.read.format("gazette").option("broker.address", broker.address)
    r = r.option("store.fileRoot", broker.store_root)
    for k, v in options.items():
        r = r.option(k, v)
    return r


def test_short_name_resolves_on_the_server_without_registration(remote, broker, client, create_journal):
    create_journal("connect/auto", length=1024)
    expected = fill(client, broker, "connect/auto", batches=3, per_batch=20)
    df = reader(remote, broker).load("connect/auto")
    assert df.schema.simpleString() == "struct<journal:string,offset:bigint,value:string>"
    got = sorted((r.offset, r.value.encode()) for r in df.collect())
    assert got == expected


def test_registered_by_class_from_the_client(remote, broker, client, create_journal):
    from pyspark_gazette import DefaultSource

    remote.dataSource.register(DefaultSource)
    create_journal("connect/byclass")
    client.append("connect/byclass", b'{"b":2}\n')
    assert [r.value for r in reader(remote, broker).load("connect/byclass").collect()] == ['{"b":2}']


def test_typed_read_of_journals_chosen_by_a_selector(remote, broker, client, create_journal):
    for name, team in (("connect/red-1", "red"), ("connect/red-2", "red"), ("connect/blue", "blue")):
        create_journal(name, labels={"team": team})
        client.append(name, ndjson(events(6, start=100 if team == "blue" else 0)))
    df = reader(remote, broker, selector="team=red").schema(TYPED).load()
    assert df.schema.simpleString() == "struct<id:bigint,country:string,amount:double>"
    rows = sorted(tuple(r) for r in df.where("country = 'DE'").collect())
    # ids 1 and 4 are DE in each of the two red journals; the blue one is not selected.
    assert rows == [(1, "DE", 0.5), (1, "DE", 0.5), (4, "DE", 2.0), (4, "DE", 2.0)]
    # Metadata columns of a typed schema come along over Connect too.
    meta = reader(remote, broker, selector="team=red").schema("id LONG, _journal STRING, _offset LONG").load()
    assert sorted({r._journal for r in meta.collect()}) == ["connect/red-1", "connect/red-2"]


def test_filter_pushdown_with_spark_conf_set_from_the_client(remote, broker, client, create_journal):
    """``filterPushdown`` also needs a SQL conf; a client's ``spark.conf.set`` reaches the server's planner."""
    from pyspark.errors import PySparkException

    create_journal("connect/push", length=1024)
    lines = fill(client, broker, "connect/push", batches=3, per_batch=20)
    cut = lines[25][0]
    query = reader(remote, broker, journals="connect/push", filterPushdown="true").load().where(f"offset >= {cut}")
    with pytest.raises(PySparkException) as ei:  # Spark's own check, before any of our code runs
        query.collect()
    assert "DATA_SOURCE_PUSHDOWN_DISABLED" in str(ei.value)
    remote.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    assert sorted(r.offset for r in query.collect()) == [o for o, _ in lines[25:]]


def test_batch_write_from_a_client_dataframe(remote, broker, client, create_journal):
    create_journal("connect/out", length=1024)
    rows = [(i, f"user-{i % 5}", i * 0.25) for i in range(300)]
    df = remote.createDataFrame(rows, "id long, user string, amount double").repartition(3)
    (
        df.write.format("gazette")
        .mode("append")
        .option("broker.address", broker.address)
        .option("journal", "connect/out")
        .option("maxBatchBytes", "2k")
        .save()
    )
    assert broker.wait_persisted(30)
    got = sorted(
        (d["id"], d["user"], d["amount"])
        for _, p in NDJSON.decode_all(client.read_all("connect/out"))
        for d in [json.loads(p)]
    )
    assert got == rows


def test_copy_into_the_source_journal_is_refused(remote, broker, client, create_journal, tmp_path):
    """The journal column passed through from the read routes nothing back to its source, in
    batch and stream, through Connect as in a classic session."""
    create_journal("connect/src", length=1024)
    fill(client, broker, "connect/src", batches=1, per_batch=10)
    refused = r"'connect/src'.*the query would write into its own source.*allowWriteToSource=true"
    df = reader(remote, broker).load("connect/src")
    with pytest.raises(Exception, match=refused):
        df.write.format("gazette").mode("append").option("broker.address", broker.address).save()
    stream = (
        remote.readStream.format("gazette")
        .option("broker.address", broker.address)
        .option("startingOffsets", "earliest")
        .load("connect/src")
    )
    with pytest.raises(Exception, match=refused):
        (
            stream.writeStream.format("gazette")
            .option("broker.address", broker.address)
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
            .awaitTermination()
        )
    assert len(list(NDJSON.decode_all(client.read_all("connect/src")))) == 10


def stream_a_to_b(session, broker, checkpoint):
    source = (
        session.readStream.format("gazette")
        .option("broker.address", broker.address)
        .option("store.fileRoot", broker.store_root)
        .option("journals", "connect/a")
        .option("startingOffsets", "earliest")
        .load()
    )
    out = source.selectExpr(
        "offset AS source_offset",
        "CAST(get_json_object(value, '$.id') AS LONG) AS id",
        "lower(get_json_object(value, '$.country')) AS country",
    )
    return (
        out.writeStream.format("gazette")
        .option("broker.address", broker.address)
        .option("journal", "connect/b")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def expected_b(lines):
    return [
        {"source_offset": o, "id": json.loads(v)["id"], "country": json.loads(v)["country"].lower()} for o, v in lines
    ]


def test_stream_a_to_b_exactly_once(remote, broker, client, create_journal, tmp_path):
    create_journal("connect/a", length=1024)
    create_journal("connect/b", length=1024)
    checkpoint = tmp_path / "ck"  # written by the server; the same filesystem as the test's
    lines = fill(client, broker, "connect/a", batches=3, per_batch=30)
    q = stream_a_to_b(remote, broker, checkpoint)
    q.awaitTermination()
    assert q.exception() is None
    assert multiset(journal_rows(client, "connect/b")) == multiset(expected_b(lines))

    # The same checkpoint picks up only what was appended since.
    more = fill(client, broker, "connect/a", batches=1, per_batch=15)
    q = stream_a_to_b(remote, broker, checkpoint)
    q.awaitTermination()
    lines += more
    assert multiset(journal_rows(client, "connect/b")) == multiset(expected_b(lines))

    # As if the server died after the sink committed the last batch but before its commit log
    # did: the batch runs again and the registers keep B free of duplicates.
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    for name in (str(last), f".{last}.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    size = len(client.read_all("connect/b"))
    q = stream_a_to_b(remote, broker, checkpoint)
    q.awaitTermination()
    assert [p.batchId for p in q.recentProgress if p.numInputRows] == [last]  # it did run again
    assert len(client.read_all("connect/b")) == size
    assert multiset(journal_rows(client, "connect/b")) == multiset(expected_b(lines))
    assert {name for name, _ in registers(client, "connect/b")} == {f"gzsink/{q.id}/0"}


def error_text(exc) -> str:
    return str(exc).lower()


def test_option_errors_name_the_option(remote, broker, client, create_journal, tmp_path):
    from pyspark.errors import PySparkException

    create_journal("connect/opts")
    client.append("connect/opts", b'{"a":1}\n')
    for key, value in (("startingOffsets", "soon"), ("maxPartitionBytes", "-1"), ("bogusOption", "1")):
        with pytest.raises(PySparkException) as ei:
            reader(remote, broker, journals="connect/opts", **{key: value}).load().collect()
        assert f"option '{key.lower()}'" in error_text(ei.value), key
    with pytest.raises(PySparkException) as ei:
        reader(remote, broker, journals="connect/missing").load().collect()
    assert "connect/missing" in str(ei.value)
    # A task's error, raised in an executor's Python worker, reaches the client whole.
    create_journal("connect/bad")
    client.append("connect/bad", b'{"id":1}\n{"id":"x"}\n')
    with pytest.raises(PySparkException) as ei:
        reader(remote, broker, journals="connect/bad", mode="FAILFAST").schema("id LONG").load().collect()
    assert "connect/bad" in str(ei.value) and "message at offset 9" in str(ei.value)

    df = remote.createDataFrame([("x",)], "value string")
    with pytest.raises(PySparkException) as ei:
        df.write.format("gazette").mode("append").option("broker.address", broker.address).option(
            "journal", "connect/opts"
        ).option("maxBatchBytes", "lots").save()
    assert "option 'maxbatchbytes'" in error_text(ei.value)

    stream = remote.readStream.format("gazette").option("broker.address", broker.address)
    with pytest.raises(PySparkException) as ei:
        q = (
            stream.option("journals", "connect/opts")
            .option("endingOffsets", "latest")  # batch-only
            .load()
            .writeStream.format("memory")
            .queryName("connect_opts")
            .option("checkpointLocation", str(tmp_path / "ck"))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
    assert "option 'endingoffsets'" in error_text(ei.value)


def test_options_come_from_the_server_side(remote, connect_server, broker, client, create_journal, monkeypatch):
    """Environment variables and the options file are read where the source runs: the server."""
    from pyspark.errors import PySparkException

    create_journal("connect/env")
    client.append("connect/env", b'{"a":1}\n')
    # The client's environment is not the source's: the address set here is not seen.
    monkeypatch.setenv("PYSPARK_GAZETTE_BROKER_ADDRESS", broker.address)
    monkeypatch.setenv("BROKER_ADDRESS", broker.address)
    with pytest.raises(PySparkException) as ei:
        remote.read.format("gazette").option("store.fileRoot", broker.store_root).load("connect/env").collect()
    assert "option 'broker.address': is required" in str(ei.value)
    # The server's options file is (the server was started with PYSPARK_GAZETTE_CONF naming it).
    options_file = connect_server.options_file
    options_file.write_text(f"broker.address = {broker.address}\nstore.fileRoot = {broker.store_root}\n")
    try:
        rows = remote.read.format("gazette").load("connect/env").collect()
    finally:
        options_file.write_text(NO_OPTIONS)
    assert [(r.offset, r.value) for r in rows] == [(0, '{"a":1}')]


def test_a_client_without_the_package_reads_by_short_name(connect_mode, broker, client, create_journal):
    """The client only builds a plan: ``format("gazette")`` needs no pyspark_gazette there."""
    create_journal("connect/thin")
    client.append("connect/thin", b'{"t":1}\n{"t":2}\n')
    script = textwrap.dedent(
        """
        import json, sys
        sys.modules["pyspark_gazette"] = None  # any import of it now fails
        from pyspark.sql import SparkSession
        url, address, root = sys.argv[1:]
        spark = SparkSession.builder.remote(url).getOrCreate()
        df = (spark.read.format("gazette").option("broker.address", address)
              .option("store.fileRoot", root).load("connect/thin"))
        print(json.dumps([[r.offset, r.value] for r in df.collect()]))
        spark.stop()
        """
    )
    env = {k: v for k, v in os.environ.items() if k != "SPARK_CONNECT_MODE_ENABLED"}
    out = subprocess.run(
        [sys.executable, "-c", script, connect_mode, broker.address, broker.store_root],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [[0, '{"t":1}'], [8, '{"t":2}']]
