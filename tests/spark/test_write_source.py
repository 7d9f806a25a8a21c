"""Writes whose rows would land in a journal the same query reads are refused before anything is
appended, however the rows are routed (the ``journal`` option or a ``journal`` column passed
through from a gazette read), in batch and stream, unless ``allowWriteToSource`` is true.

Each test does what a user does: read a journal with ``format("gazette")``, write the rows with
``format("gazette")``, and read the journals back with the project's client.
"""

from __future__ import annotations

import json

import pytest

from pyspark_gazette.message import NDJSON

pytestmark = pytest.mark.both_brokers

LINES = [{"order": i, "sku": f"s{i % 3}"} for i in range(12)]


def fill(client, journal):
    client.append(journal, b"".join(json.dumps(r).encode() + b"\n" for r in LINES))


def rows(client, journal):
    return [json.loads(p) for _, p in NDJSON.decode_all(client.read_all(journal))]


def read(spark, broker, journal, **options):
    r = spark.read.format("gazette").option("broker.address", broker.address)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load(journal)


def write(df, broker, **options):
    w = df.write.format("gazette").mode("append").option("broker.address", broker.address)
    for k, v in options.items():
        w = w.option(k, v)
    return w


def refused(journal):
    """The refusal: one sentence naming the journal and allowWriteToSource."""
    return rf"'{journal}'.*the query would write into its own source.*allowWriteToSource=true"


def test_batch_copy_routed_by_the_passed_through_journal_column_is_refused(spark, broker, client, create_journal):
    """``read.load(A).write.format("gazette").save()`` (no journal option) used to double A."""
    create_journal("shop/orders")
    fill(client, "shop/orders")
    df = read(spark, broker, "shop/orders")
    for passed in (df, df.select("journal", "value"), df.filter("offset >= 0"), df.withColumn("x", df["offset"] + 1)):
        with pytest.raises(Exception, match=refused("shop/orders")):
            write(passed, broker).save()
    assert rows(client, "shop/orders") == LINES  # nothing appended
    write(df, broker, allowWriteToSource="true").save()
    assert sorted(r["order"] for r in rows(client, "shop/orders")) == sorted([r["order"] for r in LINES] * 2)


def test_stream_copy_routed_by_the_passed_through_journal_column_is_refused(
    spark, broker, client, create_journal, tmp_path
):
    """The user's stream: readStream.load(A).writeStream.format("gazette") without a journal option
    copied A into itself without end."""
    create_journal("shop/orders-enriched")
    fill(client, "shop/orders-enriched")
    df = (
        spark.readStream.format("gazette")
        .option("broker.address", broker.address)
        .option("startingOffsets", "earliest")
        .load("shop/orders-enriched")
    )
    w = df.writeStream.format("gazette").option("broker.address", broker.address)
    with pytest.raises(Exception, match=refused("shop/orders-enriched")):
        w.option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start().awaitTermination()
    assert rows(client, "shop/orders-enriched") == LINES


def test_journal_option_naming_a_source_journal_is_refused_whichever_columns_pass(
    spark, broker, client, create_journal
):
    """The option names the source while the rows' journal column is gone or renamed: the other
    columns still say where they were read from."""
    create_journal("shop/a")
    create_journal("shop/b")
    fill(client, "shop/a")
    df = read(spark, broker, "shop/a,shop/b")
    for passed in (df.select("value"), df.withColumnRenamed("journal", "src"), df.select("offset", "value")):
        with pytest.raises(Exception, match=refused("shop/b")):
            write(passed, broker, journal="shop/b").save()
    assert rows(client, "shop/a") == LINES and rows(client, "shop/b") == []


def test_save_path_naming_the_load_path_is_refused(spark, broker, client, create_journal):
    """``load(A)`` then ``save(A)`` with the same other options: the write's options are the
    read's, yet the rows would still land in A."""
    create_journal("shop/orders")
    fill(client, "shop/orders")
    df = read(spark, broker, "shop/orders")
    for passed in (df.select("value"), df):
        with pytest.raises(Exception, match=refused("shop/orders")):
            write(passed, broker).save("shop/orders")
    assert rows(client, "shop/orders") == LINES


def test_journal_option_matching_the_read_selector_is_refused(spark, broker, client, create_journal):
    create_journal("shop/orders", labels={"app": "shop"})
    create_journal("shop/returns", labels={"app": "shop"})
    create_journal("shop/copy")
    fill(client, "shop/orders")
    df = spark.read.format("gazette").option("broker.address", broker.address).option("selector", "app=shop").load()
    with pytest.raises(Exception, match=r"selector 'app=shop'.*'shop/returns'.*allowWriteToSource=true"):
        write(df.select("value"), broker, journal="shop/returns").save()
    assert rows(client, "shop/returns") == []
    write(df.select("value"), broker, journal="shop/copy").save()  # not read by the query
    assert rows(client, "shop/copy") == LINES


def test_a_journal_column_the_user_computes_still_routes(spark, broker, client, create_journal):
    from pyspark.sql import functions as F

    for name in ("shop/orders", "shop/orders-copy", "shop/other"):
        create_journal(name)
    fill(client, "shop/orders")
    df = read(spark, broker, "shop/orders")
    write(df.withColumn("journal", F.concat(F.col("journal"), F.lit("-copy"))), broker).save()
    write(df.withColumn("journal", F.lit("shop/other")), broker).save()
    assert rows(client, "shop/orders-copy") == LINES
    assert rows(client, "shop/other") == LINES
    assert rows(client, "shop/orders") == LINES


def test_a_temporary_view_still_takes_inserts(spark, broker, client, create_journal):
    """``INSERT INTO v`` hands the writer the view's own schema: that is not a read of the journal."""
    create_journal("sql/view")
    fill(client, "sql/view")
    spark.sql(
        "CREATE OR REPLACE TEMPORARY VIEW orders_view USING gazette "
        f"OPTIONS (journals 'sql/view', `broker.address` '{broker.address}')"
    )
    try:
        spark.sql("""INSERT INTO orders_view VALUES ('any', 0, '{"order": 100}')""")
        assert rows(client, "sql/view") == [*LINES, {"order": 100}]
        with pytest.raises(Exception, match="allowWriteToSource"):
            spark.sql("INSERT INTO orders_view SELECT * FROM orders_view")
        assert len(rows(client, "sql/view")) == len(LINES) + 1
    finally:
        spark.sql("DROP VIEW IF EXISTS orders_view")


def test_a_flow_collection_read_written_back_into_its_journals_is_refused(spark, broker, client, create_journal):
    """A ``collection`` read covers the collection's journals: routing by its journal column, or a
    journal option naming one of them, is refused; another journal takes the rows."""
    journal = "acme/orders/g1/region=eu/pivot=00"
    labels = {"estuary.dev/collection": "acme/orders", "estuary.dev/field/region": "eu"}
    create_journal(journal, labels=labels)
    create_journal("acme/copy")
    df = (
        spark.read.format("gazette").option("broker.address", broker.address).option("collection", "acme/orders").load()
    )
    with pytest.raises(Exception, match=refused("acme/orders")):
        write(df, broker).save()
    with pytest.raises(Exception, match=refused(journal)):
        write(df.select("value"), broker, journal=journal).save()
    assert client.read_all(journal) == b""
    write(df.select("value"), broker, journal="acme/copy").save()  # an empty collection: nothing to copy


def test_files_written_from_a_read_carry_no_credentials_of_its_broker_address(
    spark, broker, client, create_journal, tmp_path
):
    """A read's marks are kept in a Parquet file's footer with the schema: a broker address given
    with a user and password, a token in its query and a signed store endpoint leaves none of
    them in the written files, while the mark is there and still refuses a write to the source."""
    create_journal("shop/orders")
    fill(client, "shop/orders")
    scheme, _, hostport = broker.address.rpartition("://")
    secret = f"{scheme or 'http'}://reader:secretpw@{hostport}/?token=secretpw&sig=secretpw"
    df = (
        spark.read.format("gazette")
        .option("broker.address", secret)
        .option("store.s3.endpoint", "http://key:secretpw@s3.invalid:9000")
        .load("shop/orders")
    )
    assert sorted(json.loads(v)["order"] for v in df.selectExpr("CAST(value AS STRING)").toPandas()["value"]) == [
        r["order"] for r in LINES
    ]
    out = tmp_path / "out.parquet"
    df.write.parquet(str(out))
    written = [p.read_bytes() for p in out.rglob("*") if p.is_file()]
    assert any(b"pyspark_gazette.read" in b for b in written)  # the marks are in the footers
    assert sum(b.count(b"secretpw") + b.count(b"reader") for b in written) == 0
    assert "secretpw" not in df.schema.json()
    with pytest.raises(Exception, match=refused("shop/orders")):  # the same brokers, given plainly
        write(spark.read.parquet(str(out)), broker).save()
