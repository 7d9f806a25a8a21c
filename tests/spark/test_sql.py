"""SQL over journals: ``CREATE TABLE ... USING gazette``, ``CREATE TEMPORARY VIEW ... USING
gazette`` and ``INSERT INTO`` (local[2] Spark, embedded broker and real Gazette)."""

from __future__ import annotations

import json
import uuid

import pytest
from spark_helpers import events, ndjson

pytestmark = pytest.mark.both_brokers


def table_name() -> str:
    return "t_" + uuid.uuid4().hex[:8]


def ids(client, journal):
    from pyspark_gazette.message import NDJSON

    return sorted(json.loads(p)["id"] for _, p in NDJSON.decode_all(client.read_all(journal)))


def test_create_table_select_and_insert_into(spark, broker, client, create_journal):
    """The user's steps: CREATE TABLE with OPTIONS (which Spark used to hand over prefixed
    'option.'), SELECT, INSERT INTO, SELECT again."""
    create_journal("sql/clicks")
    client.append("sql/clicks", ndjson(events(3)))
    t = table_name()
    spark.sql(
        f"CREATE TABLE {t} USING gazette OPTIONS (journals 'sql/clicks', `broker.address` '{broker.address}', "
        f"`store.fileRoot` '{broker.store_root}')"
    )
    try:
        assert [f.name for f in spark.table(t).schema.fields] == ["journal", "offset", "value"]
        assert spark.sql(f"SELECT count(*) AS n FROM {t}").first().n == 3
        spark.sql(f"""INSERT INTO {t} (value) VALUES ('{{"id": 100}}'), ('{{"id": 101}}')""")
        assert ids(client, "sql/clicks") == [0, 1, 2, 100, 101]
        rows = spark.sql(f"SELECT get_json_object(value, '$.id') AS id FROM {t}").collect()
        assert sorted(int(r.id) for r in rows) == [0, 1, 2, 100, 101]
        # Copying the table into itself is the feedback loop the sink refuses.
        with pytest.raises(Exception, match="allowWriteToSource"):
            spark.sql(f"INSERT INTO {t} SELECT * FROM {t}")
        assert ids(client, "sql/clicks") == [0, 1, 2, 100, 101]
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {t}")


def test_create_table_refuses_secrets_in_options(spark, broker, create_journal):
    create_journal("sql/secret")
    t = table_name()
    with pytest.raises(Exception, match=r"option 'broker.authToken': is a secret.*PYSPARK_GAZETTE_BROKER_AUTHTOKEN"):
        spark.sql(
            f"CREATE TABLE {t} USING gazette OPTIONS (journals 'sql/secret', `broker.address` '{broker.address}', "
            "`broker.authToken` 'abc')"
        )
    spark.sql(f"DROP TABLE IF EXISTS {t}")


def test_temporary_views_for_reads_and_insert_into(spark, broker, client, create_journal):
    create_journal("sql/src")
    create_journal("sql/dst")
    client.append("sql/src", ndjson(events(4)))
    src, dst = table_name(), table_name()
    spark.sql(
        f"CREATE TEMPORARY VIEW {src} USING gazette OPTIONS (journals 'sql/src', `broker.address` '{broker.address}')"
    )
    spark.sql(
        f"CREATE TEMPORARY VIEW {dst} USING gazette OPTIONS (journal 'sql/dst', `broker.address` '{broker.address}')"
    )
    assert spark.sql(f"SELECT count(*) AS n FROM {src}").first().n == 4
    spark.sql(f"INSERT INTO {dst} (value) SELECT value FROM {src} WHERE get_json_object(value, '$.id') >= 2")
    assert ids(client, "sql/dst") == [2, 3]
    client.append("sql/src", ndjson(events(1, 50)))
    assert spark.sql(f"SELECT count(*) AS n FROM {src}").first().n == 5  # fresh per query
    # A view whose journals names one journal serves INSERT INTO with only value too.
    spark.sql(f"""INSERT INTO {src} (value) VALUES ('{{"id": 60}}')""")
    assert ids(client, "sql/src")[-1] == 60
    assert spark.sql(f"SELECT count(*) AS n FROM {src}").first().n == 6
