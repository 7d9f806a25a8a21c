"""Batch reads and writes on a Spark standalone cluster whose executors live on other hosts.

The executors reach the broker and the S3 server over the test network, with the token and the
store credentials given as options; moto records the client address of every fragment GET.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

from pyspark_gazette.message import NDJSON
from pyspark_gazette.protocol.auth import APPEND, LIST, READ, mint_token

from .helpers import KEY, S3_KEYS, create, fill, journal_spec

pytestmark = pytest.mark.slow


def reader(spark, broker, token, **options):
    r = spark.read.format("gazette").option("broker.address", broker.address).option("broker.authToken", token)
    for k, v in options.items():
        r = r.option(k, v)
    return r


def executor_facts(spark, gateway: str, tasks: int = 8):
    """(host address, sys.executable, pyspark_gazette.__file__, AWS variables) from ``tasks`` tasks."""

    def probe(_):
        import os
        import socket
        import sys

        import pyspark_gazette

        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.connect((gateway, 9))  # no packet is sent: this only picks the route's source address
        address = s.getsockname()[0]
        s.close()
        aws = sorted(k for k in os.environ if k.startswith("AWS_"))
        yield (address, sys.executable, pyspark_gazette.__file__, tuple(aws))

    return spark.sparkContext.parallelize(range(tasks), tasks).mapPartitions(probe).collect()


def test_executors_run_the_installed_package_on_their_hosts(spark, cluster, network):
    facts = executor_facts(spark, network.gateway)
    assert {f[0] for f in facts} <= set(network.addresses.values())
    venv = cluster.python.rsplit("/bin/", 1)[0]
    for _, python, package, aws in facts:
        assert python == cluster.python
        assert package.startswith(venv + "/lib/"), package  # the wheel's copy, not the checkout
        assert aws == ()  # nothing of the test process's environment


def test_read_spreads_direct_s3_fragment_reads_over_both_workers(spark, broker, s3, network):
    with broker.client() as client:
        create(client, journal_spec("cluster/clicks", broker.store("io"), length=1024))
        rows = fill(client, "cluster/clicks", batches=24, per_batch=40)
        fragments = client.list_fragments("cluster/clicks")
    before = len(s3.requests)
    token = mint_token(KEY, LIST | READ, "name:prefix=cluster/")
    # Small partitions: about one fragment each, so both executors get many.
    got = reader(spark, broker, token, maxPartitionBytes="2048", **S3_KEYS).load("cluster/clicks").collect()
    assert sorted(json.loads(r.value)["id"] for r in got) == [r["id"] for r in rows]

    prefix = f"/{s3.bucket}/io/"
    gets = [(addr, path) for addr, method, path in s3.requests[before:] if method == "GET" and path.startswith(prefix)]
    persisted = [f for f in fragments if f.spec.backing_store]
    assert len(persisted) >= 20
    assert len({path for _, path in gets}) == len(persisted)  # every persisted fragment read from S3 ...
    hosts = Counter(addr for addr, _ in gets)
    assert set(hosts) == set(network.addresses.values()), hosts  # ... by the executors, on both hosts


def test_typed_read_aggregates_across_executors(spark, broker):
    with broker.client() as client:
        create(client, journal_spec("cluster/typed", broker.store("typed"), length=4096))
        rows = fill(client, "cluster/typed", batches=12, per_batch=100)
    token = mint_token(KEY, LIST | READ, "name=cluster/typed")
    df = reader(spark, broker, token, **S3_KEYS).schema("id LONG, country STRING, amount DOUBLE").load("cluster/typed")
    got = {
        r.country: (r.n, r.total)
        for r in df.groupBy("country")
        .agg({"id": "count", "amount": "sum"})
        .withColumnRenamed("count(id)", "n")
        .withColumnRenamed("sum(amount)", "total")
        .collect()
    }
    want: dict[str, tuple[int, float]] = {}
    for r in rows:
        n, total = want.get(r["country"], (0, 0.0))
        want[r["country"]] = (n + 1, total + r["amount"])
    assert got == want


def test_read_without_store_credentials_fails_on_the_executors(spark, broker):
    """The executors have no AWS credentials of their own: without ``store.s3.*`` keys the
    direct fragment reads fail there, whatever the test process's environment holds."""
    with broker.client() as client:
        create(client, journal_spec("cluster/nokeys", broker.store("nokeys"), length=1024))
        fill(client, "cluster/nokeys", batches=3, per_batch=30)
    token = mint_token(KEY, LIST | READ, "name=cluster/nokeys")
    with pytest.raises(Exception, match="Unable to locate credentials"):
        reader(spark, broker, token).load("cluster/nokeys").collect()


def test_batch_write_from_both_executors(spark, broker, network):
    with broker.client() as client:
        create(client, journal_spec("cluster/written", broker.store("written"), length=8192))
        token = mint_token(KEY, LIST | APPEND, "name=cluster/written")
        df = spark.range(0, 6000, numPartitions=6).selectExpr("id", "concat('row-', id) AS label")
        (
            df.write.format("gazette")
            .mode("append")
            .option("broker.address", broker.address)
            .option("broker.authToken", token)
            .option("journal", "cluster/written")
            .save()
        )
        docs = [json.loads(p) for _, p in NDJSON.decode_all(client.read_all("cluster/written"))]
    assert sorted(d["id"] for d in docs) == list(range(6000))
    assert all(d["label"] == f"row-{d['id']}" for d in docs)
