"""Options of SQL catalog tables and views (spark/options/catalog.py), without a Spark session."""

from __future__ import annotations

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from pyspark_gazette.errors import OptionError
from pyspark_gazette.spark.options import READ, WRITE, ReadOptions, WriteOptions
from pyspark_gazette.spark.options.catalog import (
    catalog_options,
    for_scope,
    is_catalog,
    is_write_target,
    stash,
    stashed,
    table_options,
)

#: What Spark 4.3 hands schema() for CREATE TABLE t USING gazette OPTIONS (...) COMMENT 'c'.
PROPERTIES = {
    "option.journals": "a/b/c",
    "option.broker.address": "http://h:1",
    "option.maxpartitionbytes": "1m",
    "journals": "a/b/c",
    "broker.address": "http://h:1",
    "maxpartitionbytes": "1m",
    "comment": "c",
    "owner": "root",
    "provider": "gazette",
}
SCHEMA = StructType([StructField(n, StringType(), False) for n in ("journal", "offset", "value")])


def test_create_table_properties_become_the_tables_options():
    assert is_catalog(PROPERTIES) and not is_catalog({"journals": "a/b/c"})
    options = catalog_options(PROPERTIES)
    assert options == {"journals": "a/b/c", "broker.address": "http://h:1", "maxPartitionBytes": "1m"}
    assert ReadOptions.parse(options, env={}).max_partition_bytes == 1 << 20


def test_secrets_are_refused_in_a_catalog():
    with pytest.raises(OptionError, match=r"option 'broker.authToken': is a secret.*PYSPARK_GAZETTE_BROKER_AUTHTOKEN"):
        catalog_options({**PROPERTIES, "option.broker.authtoken": "x"})


def test_stashed_options_serve_reads_and_writes():
    schema = stash(SCHEMA, catalog_options(PROPERTIES))
    assert all(f.nullable for f in schema.fields)
    assert stashed(schema)["journals"] == "a/b/c"
    read = table_options({}, schema, READ)
    assert ReadOptions.parse(read, env={}).journals == ("a/b/c",)
    write = table_options({}, schema, WRITE)  # maxPartitionBytes (reads only) dropped
    assert WriteOptions.parse(write, env={}).journal == "a/b/c"
    # Options given with the query win.
    assert table_options({"journals": "x/y/z"}, schema, READ)["journals"] == "x/y/z"


def test_journal_and_journals_stand_for_each_other():
    assert for_scope({"journal": "a/b/c"}, READ) == {"journals": "a/b/c"}
    assert for_scope({"journals": "a/b/c"}, WRITE) == {"journal": "a/b/c"}
    assert for_scope({"journals": "a/b/c,d/e/f"}, WRITE) == {"journals": "a/b/c,d/e/f"}  # refused by parse
    assert for_scope({"journals": "a/b/c", "journal": "x/y/z"}, READ) == {"journals": "a/b/c", "journal": "x/y/z"}


def test_a_view_is_a_write_target_when_a_write_can_name_its_journal():
    assert is_write_target({"journal": "a/b/c"})
    assert is_write_target({"JOURNALS": "a/b/c", "broker.address": "http://x:1"})  # one journal
    assert not is_write_target({"journals": "a/b/c,d/e/f"})
    assert not is_write_target({"journals": "a/b/c", "selector": "x=y"})
    assert not is_write_target({"journal": "a/b/c", "path": "a/b/c"})
    assert not is_write_target({"selector": "x=y"})
