"""Spark reads fragments real Gazette v0.103.0 persisted, in every codec, straight from their stores.

NONE, GZIP, ZSTANDARD and SNAPPY on ``file://`` (the cluster's file root, as ``store.fileRoot``);
GZIP_OFFLOAD_DECOMPRESSION and ZSTANDARD on S3 (moto's server). Each journal's rows, in offset
order, are byte for byte what ``gazctl journals read`` returns, and the plan reads every persisted
fragment from its store (only the open fragment goes through a broker).
"""

from __future__ import annotations

from collections import defaultdict

import pytest

import realfragments
import realgazette

pytestmark = pytest.mark.slow


def test_spark_reads_gazette_fragments_in_every_codec(spark, gazette_cluster, s3_server, s3_bucket):
    realgazette.require()
    from pyspark_gazette.quickstart.spark_job import planned_read

    specs = realfragments.codec_specs(s3_server, s3_bucket)
    content = realfragments.write(gazette_cluster, specs)
    prefix = specs[0].name.split("/")[0]
    options = {
        "broker.address": gazette_cluster.address,
        "store.fileRoot": gazette_cluster.file_root,
        "store.s3.accessKeyId": "testing",
        "store.s3.secretAccessKey": "testing",
        "selector": f"name:prefix={prefix}/",
    }

    with gazette_cluster.client() as c:
        persisted = sum(f.spec.end - f.spec.begin for s in specs for f in c.list_fragments(s.name) if f.spec.mod_time)
    planned = planned_read(options)
    assert planned.direct_bytes == persisted > 0
    assert planned.direct_fragments >= 2 * len(specs)

    reader = spark.read.format("gazette")
    for key, value in options.items():
        reader = reader.option(key, value)
    rows = reader.load().collect()
    by_journal: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for r in rows:
        by_journal[r.journal].append((r.offset, r.value))
    assert sorted(by_journal) == sorted(content)
    for spec in specs:
        messages = sorted(by_journal[spec.name])
        # Messages are contiguous lines: each begins where the previous one ended.
        offset = 0
        for at, value in messages:
            assert at == offset, (spec.name, at, offset)
            offset += len(value.encode()) + 1
        got = b"".join(value.encode() + b"\n" for _, value in messages)
        assert got == realfragments.gazctl_read(gazette_cluster, spec.name) == content[spec.name], spec.name
