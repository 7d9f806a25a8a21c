"""Spark over journals persisted to GCS and Azure Blob (fake-gcs-server and Azurite on loopback).

The embedded broker persists each journal's fragments to a ``gs://`` or ``azure://`` store;
executors read them straight from the emulator (store options only, no file root), or through
URLs the broker signed (no store options at all), in batch and in an AvailableNow stream.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from spark_helpers import fill

from pyspark_gazette.protocol import pb


@dataclass
class Store:
    url: str  # the journals' store URL
    endpoint: str  # where signed URLs must point
    broker_options: dict[str, Any]  # the broker's storage options
    spark_options: dict[str, str]  # what executors need to read the store directly
    bad_options: dict[str, str]  # credentials the store refuses ({} where it does not check)


@pytest.fixture(params=["gcs", "azure"])
def store(request) -> Store:
    if request.param == "gcs":
        endpoint = request.getfixturevalue("gcs_server")
        bucket = request.getfixturevalue("gcs_bucket")
        key = request.getfixturevalue("gcs_signing_key")
        return Store(
            url=f"gs://{bucket}/gz/",
            endpoint=endpoint,
            broker_options={"gs.endpoint_url": endpoint, "gs.signing_credentials": key},
            spark_options={"store.gcs.endpoint": endpoint},
            bad_options={},
        )
    import store_emulators

    endpoint = request.getfixturevalue("azurite_server")
    container = request.getfixturevalue("azure_container")
    connection = store_emulators.azurite_connection_string(endpoint)
    wrong_key = connection.replace(store_emulators.AZURITE_KEY, "d3Jvbmcta2V5LXdyb25nLWtleQ==")
    return Store(
        url=f"azure://{container}/gz/",
        endpoint=endpoint,
        broker_options={"azure.connection_string": connection},
        spark_options={"store.azure.connectionString": connection},
        bad_options={"store.azure.connectionString": wrong_key},
    )


@pytest.fixture
def cloud_broker(tmp_path, store):
    from journalspecs import make_spec
    from pyspark_gazette.broker import EmbeddedBroker
    from pyspark_gazette.client import Change, JournalClient

    with EmbeddedBroker(str(tmp_path / "b"), storage_options=store.broker_options) as broker:
        with JournalClient(broker.address) as client:

            def create(name: str, codec: int) -> None:
                spec = make_spec(name, store=store.url, length=1024, codec=codec)
                client.apply([Change(0, upsert=spec)])

            yield broker, client, create


def read(spark, broker, journal: str, options: dict[str, str]):
    r = spark.read.format("gazette").option("broker.address", broker.address)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load(journal)


@pytest.mark.parametrize("codec", [pb.ZSTANDARD, pb.GZIP_OFFLOAD_DECOMPRESSION])
def test_batch_reads_fragments_straight_from_the_store(spark, store, cloud_broker, codec):
    broker, client, create = cloud_broker
    journal = "cloud/" + uuid.uuid4().hex[:8]
    create(journal, codec)
    expected = fill(client, broker, journal, batches=4, per_batch=40)
    persisted = [f.spec for f in client.list_fragments(journal) if f.spec.mod_time]
    assert len(persisted) >= 3 and {f.backing_store for f in persisted} == {store.url}
    rows = read(spark, broker, journal, store.spark_options).collect()
    assert sorted((r.offset, r.value.encode()) for r in rows) == expected
    if store.bad_options:  # the executors really open the store: a wrong key fails the read
        with pytest.raises((PySparkException, Py4JJavaError)):
            read(spark, broker, journal, store.bad_options).collect()


def test_signed_urls_need_no_store_credentials(spark, store, cloud_broker):
    broker, client, create = cloud_broker
    journal = "signed/" + uuid.uuid4().hex[:8]
    create(journal, pb.GZIP)
    expected = fill(client, broker, journal, batches=4, per_batch=40)
    signed = [f.signed_url for f in client.list_fragments(journal, signature_ttl=60) if f.spec.mod_time]
    assert signed and all(url.startswith(store.endpoint + "/") for url in signed)
    assert all(("X-Goog-Signature=" in url) or ("sig=" in url) for url in signed)
    rows = read(spark, broker, journal, {"signedUrls": "true"}).collect()
    assert sorted((r.offset, r.value.encode()) for r in rows) == expected


def test_available_now_stream_from_the_store(spark, store, cloud_broker, tmp_path):
    broker, client, create = cloud_broker
    journal = "stream/" + uuid.uuid4().hex[:8]
    create(journal, pb.SNAPPY)
    expected = fill(client, broker, journal, batches=4, per_batch=40)
    r = spark.readStream.format("gazette").option("broker.address", broker.address)
    for k, v in {**store.spark_options, "startingOffsets": "earliest"}.items():
        r = r.option(k, v)
    name = "q" + uuid.uuid4().hex[:8]
    q = (
        r.load(journal)
        .writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(tmp_path / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    assert q.exception() is None, q.exception()
    rows = spark.sql(f"SELECT offset, value FROM {name}").collect()
    assert sorted((r.offset, r.value.encode()) for r in rows) == expected


def test_a_read_of_the_store_alone_equals_the_broker_read(spark, store, cloud_broker):
    """``store.url``: planned from one listing of the bucket, no broker (an unreachable
    ``broker.address``), the same rows as the broker-planned read of the persisted offsets."""
    import json
    import socket

    broker, client, create = cloud_broker
    journal = "alone/" + uuid.uuid4().hex[:8]
    create(journal, pb.GZIP)
    fill(client, broker, journal, batches=5, per_batch=40)
    end = max(f.spec.end for f in client.list_fragments(journal) if f.spec.mod_time)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        nobody = f"http://127.0.0.1:{s.getsockname()[1]}"
    alone = spark.read.format("gazette")
    for k, v in {**store.spark_options, "store.url": store.url, "framing": "ndjson", "broker.address": nobody}.items():
        alone = alone.option(k, v)
    via = read(spark, broker, journal, {**store.spark_options, "endingOffsets": json.dumps({journal: end})})
    got = sorted((r.offset, r.value) for r in alone.load(journal).collect())
    assert got and got == sorted((r.offset, r.value) for r in via.collect())
