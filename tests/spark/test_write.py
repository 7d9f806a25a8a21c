"""Batch writes through ``df.write.format("gazette")`` into an embedded broker.

Content is read back with the project's client and message framings, not the Spark reader.
Fragments are 1 KiB, so writes roll and persist many fragments through each codec.
"""

from __future__ import annotations

import base64
import datetime
import decimal
import json
import os
import subprocess
import sys
import textwrap

import pytest

from pyspark_gazette.message import NDJSON, Envelope, Sequencer, extract_uuid_json, framing_by_name
from pyspark_gazette.protocol import pb

CODECS = {"NONE": pb.NONE, "GZIP": pb.GZIP, "ZSTANDARD": pb.ZSTANDARD, "SNAPPY": pb.SNAPPY}
CONTENT_TYPES = {
    "ndjson": "application/x-ndjson",
    "lines": "text/plain",
    "csv": "text/csv",
    "protobuf-fixed": "application/x-protobuf-fixed",
}


def writer(df, broker, **options):
    w = df.write.format("gazette").mode("append").option("broker.address", broker.address)
    for k, v in options.items():
        w = w.option(k, v)
    return w


def payloads(client, journal, framing="ndjson"):
    return [p for _, p in framing_by_name(framing).decode_all(client.read_all(journal))]


def docs(client, journal):
    return [json.loads(p) for p in payloads(client, journal)]


def persisted_payloads(client, broker, journal, framing):
    assert broker.wait_persisted(30)
    return payloads(client, journal, framing)


@pytest.mark.parametrize("codec", list(CODECS))
@pytest.mark.parametrize("binary", [False, True], ids=["string", "binary"])
def test_value_column_round_trips_in_every_framing(spark, broker, client, create_journal, codec, binary):
    for framing, ct in CONTENT_TYPES.items():
        create_journal(f"test/{framing}", codec=CODECS[codec], content_type=ct, length=1024)
    framings = list(CONTENT_TYPES)
    rows = [(f"test/{framings[i % 4]}", json.dumps({"i": i, "s": f"row,{i} é"})) for i in range(400)]
    df = spark.createDataFrame(rows, "journal string, value string").repartition(3)
    if binary:
        df = df.selectExpr("journal", "cast(value as binary) as value")
    writer(df, broker, maxBatchBytes="2k").save()
    for framing in framings:
        got = persisted_payloads(client, broker, f"test/{framing}", framing)
        want = [v.encode() for j, v in rows if j == f"test/{framing}"]
        assert sorted(got) == sorted(want), framing
        assert len(got) == 100


@pytest.mark.both_brokers
@pytest.mark.parametrize("codec", list(CODECS))
def test_columns_become_json_documents(spark, broker, client, create_journal, codec):
    create_journal("test/docs", codec=CODECS[codec], length=1024)
    df = spark.range(500).selectExpr("id", "concat('user-', id % 7) as user", "id * 0.25 as amount", "id % 2 = 0 as ok")
    writer(df, broker, journal="test/docs", maxBatchBytes="4k").save()
    assert broker.wait_persisted(30)
    got = sorted(docs(client, "test/docs"), key=lambda d: d["id"])
    assert got == [{"id": i, "user": f"user-{i % 7}", "amount": i * 0.25, "ok": i % 2 == 0} for i in range(500)]


@pytest.mark.both_brokers
def test_every_append_holds_whole_messages(spark, broker, client, create_journal):
    create_journal("test/whole", length=1024)
    df = spark.range(2000).selectExpr("id", "repeat('x', cast(id % 50 as int)) as pad")
    writer(df, broker, journal="test/whole", maxBatchBytes="1k").save()
    data = client.read_all("test/whole")
    starts = {o for o, _ in NDJSON.decode_all(data)} | {len(data)}
    frags = client.list_fragments("test/whole")
    assert len(frags) > 1
    # Fragments never split an append, so every fragment boundary is an append boundary.
    assert {f.spec.begin for f in frags} <= starts
    assert sorted(d["id"] for d in docs(client, "test/whole")) == list(range(2000))


@pytest.mark.both_brokers
def test_column_routes_rows_without_the_option(spark, broker, client, create_journal):
    for name in ("test/a", "test/b"):
        create_journal(name)
    rows = [(["test/a", "test/b"][i % 2], i) for i in range(300)]
    writer(spark.createDataFrame(rows, "journal string, n int"), broker).save()
    for name, want in (("test/a", 0), ("test/b", 1)):
        got = docs(client, name)
        assert sorted(d["n"] for d in got) == [i for i in range(300) if i % 2 == want]
        assert all(set(d) == {"n"} for d in got)  # the journal column is not part of the document


@pytest.mark.both_brokers
def test_journal_option_wins_over_the_journal_column(spark, broker, client, create_journal):
    """As the Kafka sink's topic option beats a topic column: every row goes to the option's journal."""
    for name in ("test/a", "test/b", "test/target"):
        create_journal(name)
    rows = [(["test/a", "test/b", None][i % 3], i) for i in range(300)]
    writer(spark.createDataFrame(rows, "journal string, n int"), broker, journal="test/target").save()
    got = docs(client, "test/target")
    assert sorted(d["n"] for d in got) == list(range(300))
    assert all(set(d) == {"n"} for d in got)
    assert client.read_all("test/a") == b"" and client.read_all("test/b") == b""


def test_write_back_to_the_source_journal_is_refused(spark, broker, client, create_journal):
    """Read a journal and append its rows (journal column included) to the same journal."""
    create_journal("test/src")
    client.append("test/src", b"".join(json.dumps({"n": i}).encode() + b"\n" for i in range(10)))
    df = spark.read.format("gazette").option("broker.address", broker.address).load("test/src")
    with pytest.raises(
        Exception,
        match=r"column 'journal' comes from a gazette read of 'test/src', the journal this write appends to.*allowWriteToSource",
    ):
        writer(df, broker, journal="test/src").save()
    assert len(docs(client, "test/src")) == 10  # nothing appended
    writer(df, broker, journal="test/src", allowWriteToSource="true").save()
    assert sorted(d["n"] for d in docs(client, "test/src")) == sorted(list(range(10)) * 2)


def test_null_journal_without_option_names_the_row(spark, broker, create_journal):
    create_journal("test/a")
    df = spark.createDataFrame([("test/a", 1), ("test/a", 2), (None, 3)], "journal string, n int").coalesce(1)
    with pytest.raises(Exception, match=r"row 2 of partition 0 has a null journal"):
        writer(df, broker).save()


def test_missing_journal_option_fails_at_planning(spark, broker, client):
    df = spark.range(3)
    with pytest.raises(Exception, match=r"JOURNAL_NOT_FOUND \(journal 'test/nope'\).*createJournals") as e:
        writer(df, broker, journal="test/nope").save()
    assert "Task" not in str(e.value)  # raised by the writer's constructor, before any task ran
    assert client.list_journals() == []


def test_missing_journal_in_column_fails_the_task(spark, broker, create_journal):
    create_journal("test/a")
    df = spark.createDataFrame([("test/a", 1), ("test/missing", 2)], "journal string, n int")
    with pytest.raises(Exception, match=r"JOURNAL_NOT_FOUND \(journal 'test/missing'\)"):
        writer(df, broker).save()


TEMPLATE = json.dumps(
    {
        "replication": 1,
        "labels": [{"name": "content-type", "value": "application/x-ndjson"}],
        "fragment": {"length": 4096, "compression_codec": "SNAPPY", "stores": ["file:///store/"]},
    }
)


def test_create_journals_for_the_option_and_for_column_values(spark, broker, client):
    writer(spark.range(5), broker, journal="new/opt", createJournals=TEMPLATE).save()
    assert sorted(d["id"] for d in docs(client, "new/opt")) == list(range(5))
    rows = [(f"new/col-{i % 3}", i) for i in range(30)]
    df = spark.createDataFrame(rows, "journal string, n int").repartition(4)  # tasks race to create
    writer(df, broker, createJournals=TEMPLATE).save()
    for k in range(3):
        info = client.get_journal(f"new/col-{k}")
        assert info.spec.fragment.compression_codec == pb.SNAPPY
        assert sorted(d["n"] for d in docs(client, f"new/col-{k}")) == list(range(k, 30, 3))


def test_a_null_type_column_is_written_as_null(spark, broker, client, create_journal):
    """``lit(None)`` is a NullType column (no Arrow buffers): written ``"x":null``, by the C
    joiner where it is built (tests/unit/test_spark_encode.py checks both joiners)."""
    from pyspark.sql.functions import lit

    create_journal("test/nulltype")
    writer(spark.range(3).withColumn("x", lit(None)), broker, journal="test/nulltype").save()
    assert sorted(payloads(client, "test/nulltype")) == [b'{"id":%d,"x":null}' % i for i in range(3)]


def test_json_encoding_of_spark_types(spark, broker, client, create_journal):
    create_journal("test/types")
    df = spark.sql(
        """
        SELECT * FROM VALUES
          (1, TIMESTAMP'2026-11-22 03:04:05.123456', DATE'2026-11-22', CAST(12.50 AS DECIMAL(10,2)),
           X'00FF10', array(1, 2), map('k', 1.5D), named_struct('a', 'x"\\n', 'b', array(named_struct('c', 1))),
           'héllo', true, CAST('NaN' AS DOUBLE), CAST(3 AS TINYINT)),
          (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)
        AS t(id, ts, d, dec, bin, arr, m, st, s, b, f, tiny)
        """
    )
    writer(df, broker, journal="test/types").save()
    got = {d["id"]: d for d in docs(client, "test/types")}
    assert got[1] == {
        "id": 1,
        "ts": "2026-11-22T03:04:05.123456Z",
        "d": "2026-11-22",
        "dec": 12.5,
        "bin": base64.b64encode(b"\x00\xff\x10").decode(),
        "arr": [1, 2],
        "m": {"k": 1.5},
        "st": {"a": 'x"\n', "b": [{"c": 1}]},
        "s": "héllo",
        "b": True,
        "f": "NaN",
        "tiny": 3,
    }
    assert got[2] == {k: (2 if k == "id" else None) for k in got[1]}
    raw = client.read_all("test/types")
    assert b'"dec":12.50' in raw  # decimals keep their exact digits
    # The session time zone does not matter: timestamps are written in UTC.
    ts = datetime.datetime(2026, 11, 22, 3, 4, 5, 123456, tzinfo=datetime.timezone.utc)
    assert datetime.datetime.fromisoformat(got[1]["ts"].replace("Z", "+00:00")) == ts
    assert decimal.Decimal("12.50") == decimal.Decimal(str(got[1]["dec"]))


def test_value_errors(spark, broker, create_journal):
    create_journal("test/lines", content_type="text/plain")
    create_journal("test/fixed", content_type="application/x-protobuf-fixed")
    bad = spark.createDataFrame([("ok",), ("two\nlines",)], "value string").coalesce(1)
    with pytest.raises(Exception, match=r"row 1 of partition 0 has a value containing a newline"):
        writer(bad, broker, journal="test/lines").save()
    with pytest.raises(Exception, match=r"protobuf-fixed framing: without a value column"):
        writer(spark.range(2), broker, journal="test/fixed").save()
    with pytest.raises(Exception, match=r"append-only.*mode\('append'\)"):
        writer(spark.range(2), broker, journal="test/lines").mode("overwrite").save()


def test_secrets_stay_out_of_errors(spark, broker):
    secret = "s3cr3t-token-value"
    with pytest.raises(Exception) as e:
        writer(spark.range(1), broker, journal="test/nope", **{"broker.authToken": secret}).save()
    assert secret not in str(e.value)


# --------------------------------------------------------------------------------------------
# Transactional writes.


def committed(client, journal, pointer="/_meta/uuid"):
    """(read-committed documents without ACKs, all read-uncommitted documents)."""
    raw = client.read_all(journal)
    envs = []
    for offset, payload in NDJSON.decode_all(raw):
        u = extract_uuid_json(payload, pointer)
        envs.append(Envelope.from_uuid(journal, offset, offset + len(payload) + 1, u, json.loads(payload)))
    seq = Sequencer(ring_size=len(envs) + 1)
    return [e.message for e in seq.sequence(envs, include_acks=False)], [e.message for e in envs]


@pytest.mark.both_brokers
def test_transactional_rows_are_committed_by_the_driver(spark, broker, client, create_journal):
    create_journal("test/txn")
    df = spark.range(200).selectExpr("id", "cast(id as string) as s").repartition(2)
    writer(df, broker, journal="test/txn", transactional="true").save()
    got, raw = committed(client, "test/txn")
    assert sorted(d["id"] for d in got) == list(range(200))
    acks = [d for d in raw if d.get("_meta", {}).get("ack")]
    assert len(acks) == 2  # one per task (producer)
    assert all(list(d)[0] == "_meta" for d in got)


def test_transactional_value_column_and_custom_pointer(spark, broker, client, create_journal):
    create_journal("test/txnv")
    df = spark.createDataFrame([(json.dumps({"n": i}),) for i in range(20)], "value string")
    writer(df, broker, journal="test/txnv", transactional="true", uuidPointer="/meta/id").save()
    got, raw = committed(client, "test/txnv", "/meta/id")
    assert sorted(d["n"] for d in got) == list(range(20))
    assert len(raw) == 20 + len({d["meta"]["id"][-12:] for d in raw})


RETRY_SCRIPT = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    address = sys.argv[1]
    spark = (SparkSession.builder.master("local[2,4]").config("spark.ui.enabled", "false")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100").getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    df = spark.range(0, 1000, 1, 2).selectExpr("id", "id * 2 as twice")
    for journal, transactional in (("test/retry-txn", "true"), ("test/retry-plain", "false")):
        (df.write.format("gazette").mode("append").option("broker.address", address)
           .option("journal", journal).option("transactional", transactional).save())
    spark.stop()
    """
)


@pytest.mark.slow
def test_task_retry_is_exactly_once_for_read_committed_readers(broker, client, create_journal, tmp_path):
    """The first attempt of partition 0 fails after appending 300 rows; Spark retries it."""
    from pyspark_gazette.spark.write.task import FAIL_ENV

    script = tmp_path / "retry.py"
    script.write_text(RETRY_SCRIPT)
    env = dict(os.environ, **{FAIL_ENV: "300", "PYSPARK_PYTHON": sys.executable})
    create_journal("test/retry-txn")
    create_journal("test/retry-plain")
    # local[2,4] lets a task fail up to 4 times; the shared session fixture never retries.
    subprocess.run([sys.executable, str(script), broker.address], env=env, check=True, timeout=300, capture_output=True)
    got, raw = committed(client, "test/retry-txn")
    assert sorted(d["id"] for d in got) == list(range(1000))  # each row exactly once
    ids = [d["id"] for d in raw if not d["_meta"].get("ack")]
    assert len(ids) >= 1300 and set(ids) == set(range(1000))  # the failed attempt's rows are there
    plain = [d["id"] for d in docs(client, "test/retry-plain")]
    assert len(plain) >= 1300 and set(plain) == set(range(1000))  # plain writes: at-least-once
