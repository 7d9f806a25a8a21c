"""Mistakes that would read the wrong data become errors (or a warning) that lead with our
message, as a user sees them through Spark (issue 15)."""

from __future__ import annotations

import logging

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException

from pyspark_gazette.errors import OptionError
from pyspark_gazette.spark.resolve import resolve_journals

SPARK_ERRORS = (PySparkException, Py4JJavaError)


@pytest.fixture
def clicks(create_journal, client):
    create_journal("errors/clicks")
    create_journal("errors/views")
    client.append("errors/clicks", b'{"n": 1}\n')
    return "errors/clicks"


def test_ending_offsets_on_a_stream_is_our_error_not_sparks_unbound_local(spark, broker, clicks, tmp_path):
    query = (
        spark.readStream.format("gazette")
        .option("broker.address", broker.address)
        .option("endingOffsets", '{"errors/clicks": 5}')
        .load(clicks)
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "chk"))
        .start()
    )
    try:
        with pytest.raises(SPARK_ERRORS) as ei:
            query.awaitTermination(120)
    finally:
        query.stop()
    text = str(ei.value)
    assert "option 'endingOffsets': does not apply to streams" in text and "availableNow" in text
    assert "UnboundLocalError" not in text and "During handling" not in text


def test_an_unknown_journal_suggests_the_closest(spark, broker, clicks):
    with pytest.raises(SPARK_ERRORS) as ei:
        spark.read.format("gazette").option("broker.address", broker.address).load("errors/click").collect()
    assert "journal(s) not found: 'errors/click' (did you mean 'errors/clicks'?)" in str(ei.value)


def test_starting_offsets_for_a_journal_the_selector_does_not_read(spark, broker, clicks):
    with pytest.raises(SPARK_ERRORS) as ei:
        (
            spark.read.format("gazette")
            .option("broker.address", broker.address)
            .option("selector", "name=errors/clicks")
            .option("startingOffsets", '{"errors/views": 0}')
            .schema("n long")
            .load()
            .collect()
        )
    text = str(ei.value)
    assert "option 'startingOffsets': names journal 'errors/views', which is not being read" in text


def test_a_selector_that_matches_nothing_warns(client, clicks, caplog):
    with caplog.at_level(logging.WARNING, logger="pyspark_gazette.spark.resolve"):
        assert resolve_journals(client, (), "name:prefix=nothing/") == []
    assert any("matches no journal" in r.getMessage() for r in caplog.records)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="pyspark_gazette.spark.resolve"):
        assert [i.name for i in resolve_journals(client, (), "name:prefix=errors/")] == [
            "errors/clicks",
            "errors/views",
        ]
    assert not caplog.records


def test_offsets_checked_against_the_selectors_journals(client, clicks):
    with pytest.raises(OptionError) as ei:
        resolve_journals(client, (), "name=errors/clicks", offsets=({"errors/clickz": 0}, "latest"))
    assert "did you mean 'errors/clicks'" in str(ei.value)
    assert resolve_journals(client, (), "name=errors/clicks", offsets=({"errors/clicks": 0}, "latest"))


# -- errors in one line (issue 25) ---------------------------------------------------------------

#: The most lines a user may see around our sentence (Spark's prefix, its worker's frame, ours).
MAX_LINES = 10


def our_sentence_is_last(error: BaseException, sentence: str) -> list[str]:
    """The lines of ``str(error)`` as a user script prints it: ours is the last (before Spark's
    ``SQLSTATE`` suffix), and there are few."""
    import re

    lines = [line for line in str(error).splitlines() if line.strip()]
    shown = lines[:-1] if re.fullmatch(r"\s*SQLSTATE: \w+\s*", lines[-1]) else lines
    assert sentence in shown[-1], lines
    assert len(lines) <= MAX_LINES, lines
    return lines


def test_a_planning_error_is_our_last_line(spark, broker, clicks):
    with pytest.raises(SPARK_ERRORS) as ei:
        spark.read.format("gazette").option("broker.address", broker.address).option("startingOffset", "earliest").load(
            clicks
        ).collect()
    our_sentence_is_last(ei.value, "option 'startingOffset': unknown option (did you mean 'startingOffsets'?)")


def test_a_wrong_broker_address_is_our_one_sentence_naming_it(spark):
    """Nothing listens at broker.address: the read fails with our sentence naming the option and
    its value (the password redacted) and what to check, not gRPC's "failed to connect"."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    address = f"http://user:s3cret@127.0.0.1:{port}"
    with pytest.raises(SPARK_ERRORS) as ei:
        spark.read.format("gazette").option("broker.address", address).load("errors/clicks").collect()
    lines = our_sentence_is_last(ei.value, f"nothing answered at broker.address 'http://REDACTED@127.0.0.1:{port}'")
    assert "check that a broker is running there and that the host and port are right" in lines[-2] + lines[-1]
    assert "s3cret" not in str(ei.value)


def test_a_task_error_is_our_last_line(spark, broker, clicks):
    df = spark.createDataFrame([("errors/clicks", 1), (None, 2)], "journal string, n int").coalesce(1)
    with pytest.raises(SPARK_ERRORS) as ei:
        df.write.format("gazette").mode("append").option("broker.address", broker.address).save()
    our_sentence_is_last(ei.value, "row 1 of partition 0 has a null journal and the journal option is not set")


@pytest.mark.both_brokers
def test_an_invalid_create_journals_spec_is_one_line(spark, broker, client):
    """An invalid spec (replication 0): a one-line error naming the option, not a 62-line
    'TransportError: Apply: gRPC UNKNOWN' chain. (The template is checked at planning by
    Gazette's JournalSpec rules; a spec the broker still refuses is a SpecError naming the option
    and the journal, spark/write/task.py resolve_journal.)"""
    spec = '{"replication": 0, "fragment": {"length": 1024, "compression_codec": "NONE"}}'
    with pytest.raises(SPARK_ERRORS) as ei:
        spark.range(3).write.format("gazette").mode("append").option("broker.address", broker.address).option(
            "journal", "errors/created"
        ).option("createJournals", spec).save()
    our_sentence_is_last(ei.value, "option 'createJournals': journal 'template/check': replication must be 1..5")
    assert "TransportError" not in str(ei.value)
    assert "errors/created" not in [i.name for i in client.list_journals()]


def test_a_created_journal_the_broker_refuses_is_one_line(spark, broker, client):
    """The one spec refusal that reaches a task: the embedded broker refuses journal names that
    begin with '..' (they would climb out of a store's prefix), which Gazette's rules, and so the
    planning check of the template, allow. The user sees one line naming the option, the journal
    and the broker's reason (the client's SpecRefusedError, spark/write/task.py resolve_journal)."""
    with pytest.raises(SPARK_ERRORS) as ei:
        spark.range(1).write.format("gazette").mode("append").option("broker.address", broker.address).option(
            "journal", "../escape"
        ).option("createJournals", '{"fragment": {"length": 4096, "compression_codec": "NONE"}}').save()
    our_sentence_is_last(
        ei.value,
        "option 'createJournals': the broker refused the spec of journal '../escape': "
        "invalid journal name '../escape': must not begin with '..'",
    )
    assert "TransportError" not in str(ei.value)
    assert client.list_journals() == []


def test_a_table_with_a_column_list_says_what_to_write_instead(spark, broker, client, clicks):
    """`CREATE TABLE t (value STRING) USING gazette OPTIONS (...)`: Spark 4.3 keeps the OPTIONS from a
    Python data source (docs/sql.md), so a SELECT or INSERT of the table gets none. The user sees
    one sentence saying so and what to write instead, and what it says works on the same table."""
    import uuid

    t = "t_" + uuid.uuid4().hex[:8]
    spark.sql(
        f"CREATE TABLE {t} (value STRING) USING gazette OPTIONS (journals '{clicks}', "
        f"`broker.address` '{broker.address}')"
    )
    try:
        for query in (f"SELECT count(*) FROM {t}", f"""INSERT INTO {t} VALUES ('{{"n": 2}}')"""):
            with pytest.raises(SPARK_ERRORS) as ei:
                spark.sql(query).collect()
            our_sentence_is_last(ei.value, "no options reached the gazette data source")
            assert "CREATE TABLE t USING gazette OPTIONS" in str(ei.value) and "WITH ('journals' =" in str(ei.value)
        assert client.read_all(clicks) == b'{"n": 1}\n'  # the refused INSERT wrote nothing
        # The options given with each query (`WITH (...)`) reach the connector.
        read = f"WITH ('journals' = '{clicks}', 'broker.address' = '{broker.address}')"
        write = f"WITH ('journal' = '{clicks}', 'broker.address' = '{broker.address}')"
        spark.sql(f"""INSERT INTO {t} {write} VALUES ('{{"n": 2}}')""")
        assert client.read_all(clicks) == b'{"n": 1}\n{"n": 2}\n'
        rows = spark.sql(f"SELECT value FROM {t} {read}").collect()
        assert sorted(r.value for r in rows) == ['{"n": 1}', '{"n": 2}']
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {t}")


READ_ONLY = "journal 'errors/readonly' is read-only (its spec's flags are O_RDONLY), so nothing can be appended to it"


@pytest.fixture
def readonly(create_journal, client):
    from pyspark_gazette.protocol.specs import O_RDONLY

    create_journal("errors/readonly", flags=O_RDONLY)
    return "errors/readonly"


@pytest.mark.both_brokers
def test_a_write_to_a_read_only_journal_fails_at_planning_in_one_sentence(spark, broker, client, readonly):
    """The journal option names a journal whose spec has O_RDONLY: the driver says so, and how to
    change it, before any task appends (where Gazette answers NOT_ALLOWED to each Append)."""
    df = spark.createDataFrame([("a",), ("b",)], "value string")
    with pytest.raises(SPARK_ERRORS) as ei:
        df.write.format("gazette").mode("append").option("broker.address", broker.address).option(
            "journal", readonly
        ).save()
    our_sentence_is_last(ei.value, READ_ONLY)
    assert "set its flags to O_RDWR (`gazctl journals edit -l name=errors/readonly`" in str(ei.value)
    assert "NOT_ALLOWED" not in str(ei.value) and "Append failed" not in str(ei.value)
    assert client.read_all(readonly) == b""


def test_a_write_routed_to_a_read_only_journal_by_its_column_fails_in_one_sentence(spark, broker, client, readonly):
    """Without the journal option the target journals are known only in the tasks: a task checks
    a journal's spec before its first append to it."""
    df = spark.createDataFrame([(readonly, "a"), (readonly, "b")], "journal string, value string").coalesce(1)
    with pytest.raises(SPARK_ERRORS) as ei:
        df.write.format("gazette").mode("append").option("broker.address", broker.address).save()
    our_sentence_is_last(ei.value, READ_ONLY)
    assert client.read_all(readonly) == b""


def test_a_stream_to_a_read_only_journal_fails_at_its_start_in_one_sentence(spark, broker, client, readonly, tmp_path):
    query = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", 1)
        .load()
        .selectExpr("CAST(value AS STRING) AS value")
        .writeStream.format("gazette")
        .option("broker.address", broker.address)
        .option("journal", readonly)
        .option("checkpointLocation", str(tmp_path / "chk"))
        .start()
    )
    try:
        with pytest.raises(SPARK_ERRORS) as ei:
            query.awaitTermination(120)
    finally:
        query.stop()
    assert READ_ONLY in str(ei.value)
    assert client.read_all(readonly) == b""
