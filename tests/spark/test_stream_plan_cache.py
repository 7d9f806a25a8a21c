"""The streaming sink reuses its resolved write plan within a process (Spark rebuilds the writer
twice per micro-batch), for at most PLAN_TTL seconds, and never caches a failure."""

from __future__ import annotations

import pytest
from pyspark.sql.types import StringType, StructField, StructType

from pyspark_gazette.client import Change
from pyspark_gazette.errors import JournalNotFoundError
from pyspark_gazette.message import CSV, NDJSON
from pyspark_gazette.spark.options import WriteOptions
from pyspark_gazette.spark.write import stream as stream_writer

SCHEMA = StructType([StructField("value", StringType())])


@pytest.fixture(autouse=True)
def empty_cache(monkeypatch):
    monkeypatch.setattr(stream_writer, "_plans", {})


def _options(broker, journal):
    return WriteOptions.parse({"broker.address": broker.address, "journal": journal})


def _delete(client, journal):
    info = client.get_journal(journal)
    client.apply([Change(expect_mod_revision=info.mod_revision, delete=journal)])


def test_second_build_within_ttl_does_not_resolve_again(broker, client, create_journal):
    create_journal("plans/a", content_type="application/x-ndjson")
    opts = _options(broker, "plans/a")
    first = stream_writer.GazetteStreamWriter(opts, SCHEMA, False)
    _delete(client, "plans/a")
    # Resolving again would raise JournalNotFoundError: the plan comes from the cache.
    second = stream_writer.GazetteStreamWriter(opts, SCHEMA, False)
    assert second.plan == first.plan
    assert second.plan.framings == (("plans/a", NDJSON),)


def test_plan_is_resolved_again_after_the_ttl(broker, client, create_journal, monkeypatch):
    create_journal("plans/b", content_type="application/x-ndjson")
    opts = _options(broker, "plans/b")
    stream_writer.GazetteStreamWriter(opts, SCHEMA, False)
    _delete(client, "plans/b")
    clock = stream_writer.time.monotonic() + stream_writer.PLAN_TTL + 1
    monkeypatch.setattr(stream_writer.time, "monotonic", lambda: clock)
    with pytest.raises(JournalNotFoundError, match="plans/b"):
        stream_writer.GazetteStreamWriter(opts, SCHEMA, False)


def test_a_failed_resolution_is_not_cached(broker, client, create_journal):
    opts = _options(broker, "plans/c")
    with pytest.raises(JournalNotFoundError, match="plans/c"):
        stream_writer.GazetteStreamWriter(opts, SCHEMA, False)
    create_journal("plans/c", content_type="application/x-ndjson")
    assert stream_writer.GazetteStreamWriter(opts, SCHEMA, False).plan.framings == (("plans/c", NDJSON),)


def test_plans_are_cached_per_options_and_schema(broker, client, create_journal):
    create_journal("plans/d", content_type="application/x-ndjson")
    create_journal("plans/e", content_type="text/csv")
    d = stream_writer.GazetteStreamWriter(_options(broker, "plans/d"), SCHEMA, False)
    e = stream_writer.GazetteStreamWriter(_options(broker, "plans/e"), SCHEMA, False)
    assert d.plan.framings == (("plans/d", NDJSON),)
    assert e.plan.framings == (("plans/e", CSV),)
    documents = StructType([StructField("a", StringType())])  # no value column: JSON documents
    plan = stream_writer.GazetteStreamWriter(_options(broker, "plans/d"), documents, False).plan
    assert (plan.value_column, plan.json_columns) == (None, ("a",))
