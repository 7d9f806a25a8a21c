"""Batch reads into Arrow batches (spark/read/arrow_output.py): framings from the content-type label, metadata columns."""

from __future__ import annotations

import pytest
from spark_helpers import fill, ndjson, reader


@pytest.mark.parametrize(
    "content_type,payloads",
    [
        ("text/plain", [b"plain line %d" % i for i in range(50)]),
        ("text/csv", [b'%d,"x, %d",y' % (i, i) for i in range(50)]),
        ("application/x-protobuf-fixed", [bytes([i]) * (i + 1) + b"\n\x00" for i in range(50)]),
    ],
)
def test_framings_from_the_content_type_label(spark, broker, client, create_journal, content_type, payloads):
    from pyspark_gazette.message import framing_for_content_type

    name = "fr/" + content_type.split("/")[1]
    create_journal(name, length=1024, content_type=content_type)
    framing = framing_for_content_type(content_type)
    for i in range(0, 50, 10):
        client.append(name, b"".join(framing.encode(p) for p in payloads[i : i + 10]))
    assert broker.wait_persisted(30)
    df = reader(spark, broker, journals=name).load()
    rows = sorted(df.collect(), key=lambda r: r.offset)
    got = [r.value if isinstance(r.value, (bytes, bytearray)) else r.value.encode() for r in rows]
    assert [bytes(v) for v in got] == payloads
    is_binary = content_type.endswith("protobuf-fixed")
    assert dict(df.dtypes)["value"] == ("binary" if is_binary else "string")


def test_metadata_columns(spark, broker, client, create_journal):
    from pyspark_gazette.message import Flags, TransactionalPublisher, set_uuid_at

    create_journal("meta/a", length=1024)
    pub = TransactionalPublisher()
    docs = []
    for i in range(3):
        doc = {"i": i, "pad": "x" * 400}  # > 1 KiB in all: the next append rolls the fragment
        set_uuid_at(doc, pub.committed())
        docs.append(doc)
    client.append("meta/a", ndjson(docs))
    client.append("meta/a", ndjson([{"i": 99}]))  # no UUID: nulls; this append rolls the first
    assert broker.wait_persisted(30)
    rows = sorted(
        reader(spark, broker, journals="meta/a", includeMetadata="true").load().collect(), key=lambda r: r.offset
    )
    assert [r.producer for r in rows[:3]] == [pub.producer.hex()] * 3
    assert [r.flags for r in rows[:3]] == [Flags.OUTSIDE_TXN] * 3
    clocks = [r.clock for r in rows[:3]]
    assert clocks == sorted(clocks) and len(set(clocks)) == 3
    assert rows[0].uuid == docs[0]["_meta"]["uuid"]
    assert rows[3].uuid is None and rows[3].clock is None
    assert rows[0].mod_time is not None and rows[3].mod_time is None  # persisted vs live tail


def test_user_schema_of_untyped_columns_reads_raw(spark, broker, client, create_journal):
    create_journal("subset/a", length=1024)
    expected = fill(client, broker, "subset/a", batches=3, per_batch=20)
    df = reader(spark, broker, journals="subset/a").schema("value STRING").load()
    assert df.columns == ["value"]
    assert sorted(r.value for r in df.collect()) == sorted(line.decode() for _, line in expected)
    df = reader(spark, broker, journals="subset/a").schema("offset LONG, value BINARY").load()
    assert df.columns == ["offset", "value"]
    assert sorted((r.offset, bytes(r.value)) for r in df.collect()) == expected
