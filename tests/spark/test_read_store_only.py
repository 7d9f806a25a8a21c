"""Reads from a fragment store alone (``store.url``, spark/read/store_plan.py): no broker is
contacted, and every read gives the rows the broker-planned read of the same offsets gives.

Journals are written through the embedded broker (a ``file://`` store, or S3 on moto's server);
the store read's end is the end of the persisted fragments (the broker's open spool is not in the
store), so each comparison reads the broker up to that offset. Every store read names an
unreachable ``broker.address`` too: a read that contacted a broker would fail.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from spark_helpers import events, fill, ndjson, reader

from pyspark_gazette.fragments import FragmentRef


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


NO_BROKER = f"http://127.0.0.1:{_closed_port()}"
#: moto's dummy credentials: the Spark session's Python workers were started without them.
S3_KEYS = {"store.s3.accessKeyId": "testing", "store.s3.secretAccessKey": "testing"}


def store_reader(spark, broker, url: str | None = None, **options):
    """A ``store.url`` read of the broker's file store, with a ``broker.address`` nothing answers."""
    r = (
        spark.read.format("gazette")
        .option("store.url", url or "file:///store/")
        .option("store.fileRoot", broker.store_root)
        .option("broker.address", NO_BROKER)
    )
    for k, v in options.items():
        r = r.option(k, v)
    return r


def persisted_end(client, journal: str) -> int:
    """The end of ``journal``'s contiguous persisted fragments, as its broker lists them."""
    end = None
    for f in client.list_fragments(journal):
        if not f.spec.mod_time:
            break
        if end is not None and f.spec.begin > end:
            break
        end = f.spec.end
    assert end is not None, f"{journal}: nothing persisted"
    return end


def rows(df, *cols) -> list[tuple]:
    cols = cols or tuple(df.columns)
    return sorted(tuple(r[c] for c in cols) for r in df.collect())


def _ending(journal: str, end: int) -> str:
    return json.dumps({journal: end})


def same_as_broker(spark, broker, client, journal: str, schema: str | None = None, **options):
    """The rows of a store read of ``journal`` and of the broker read up to its persisted end;
    asserts they are equal and not empty, and returns them."""
    end = persisted_end(client, journal)
    store = store_reader(spark, broker, journals=journal, **options)
    via = reader(spark, broker, journals=journal, endingOffsets=_ending(journal, end), **options)
    if schema:
        store, via = store.schema(schema), via.schema(schema)
    a, b = store.load(), via.load()
    assert a.schema == b.schema
    got, want = rows(a), rows(b)
    assert got and got == want
    return got


@pytest.mark.parametrize("codec", ["NONE", "GZIP", "ZSTANDARD", "SNAPPY"])
def test_ndjson_untyped_and_typed_equal_the_broker_read_for_every_codec(spark, broker, client, create_journal, codec):
    journal = f"store/codec-{codec.lower()}-{uuid.uuid4().hex[:6]}"
    create_journal(journal, length=1024, codec=codec)
    lines = fill(client, broker, journal, batches=8, per_batch=20)
    got = same_as_broker(spark, broker, client, journal, framing="ndjson")
    end = persisted_end(client, journal)
    assert [(r[0], r[1], r[2]) for r in got] == [(journal, o, v.decode()) for o, v in lines if o < end]
    typed = same_as_broker(spark, broker, client, journal, "id LONG, country STRING, amount DOUBLE", framing="ndjson")
    assert len(typed) == len(got)


@pytest.mark.both_brokers
def test_infer_schema_and_a_schema_naming_some_fields(spark, broker, client, create_journal):
    journal = f"store/typed-{uuid.uuid4().hex[:6]}"
    create_journal(journal, length=1024)
    fill(client, broker, journal, batches=6, per_batch=20)
    end = persisted_end(client, journal)
    inferred = store_reader(spark, broker, journals=journal, framing="ndjson", inferSchema="true").load()
    via = reader(spark, broker, journals=journal, inferSchema="true", endingOffsets=_ending(journal, end)).load()
    assert inferred.schema == via.schema
    assert [f.name for f in inferred.schema.fields] == ["amount", "country", "id"]
    assert rows(inferred) == rows(via)
    same_as_broker(spark, broker, client, journal, "country STRING", framing="ndjson", includeMetadata="true")


@pytest.mark.parametrize(
    "content_type,framing,payloads",
    [
        ("text/plain", "lines", [b"plain line %d " % i + b"x" * 40 for i in range(60)]),
        ("text/csv", "csv", [b'%d,"x, %d",' % (i, i) + b"y" * 40 for i in range(60)]),
        ("application/x-protobuf-fixed", "protobuf-fixed", [bytes([i]) * (i + 40) + b"\n\x00" for i in range(60)]),
    ],
)
def test_other_framings_equal_the_broker_read(spark, broker, client, create_journal, content_type, framing, payloads):
    from pyspark_gazette.message import framing_by_name

    journal = f"store/{framing}-{uuid.uuid4().hex[:6]}"
    create_journal(journal, length=1024, content_type=content_type)
    fr = framing_by_name(framing)
    for i in range(0, 60, 10):
        client.append(journal, b"".join(fr.encode(p) for p in payloads[i : i + 10]))
    assert broker.wait_persisted(30)
    got = same_as_broker(spark, broker, client, journal, framing=framing)
    values = [bytes(v) if isinstance(v, (bytes, bytearray)) else v.encode() for _, _, v in got]
    assert values == payloads[: len(values)] and len(values) >= 30


def test_a_store_url_without_a_file_root_reads_absolute_paths(spark, broker, client, create_journal):
    journal = f"store/abs-{uuid.uuid4().hex[:6]}"
    create_journal(journal, length=1024)
    fill(client, broker, journal, batches=4, per_batch=20)
    end = persisted_end(client, journal)
    df = (
        spark.read.format("gazette")
        .option("store.url", "file://" + os.path.join(broker.store_root, "store") + "/")
        .option("journals", journal)
        .option("framing", "ndjson")
        .load()
    )
    want = reader(spark, broker, journals=journal, endingOffsets=_ending(journal, end), **S3_KEYS).load()
    assert rows(df) == rows(want) and rows(df)


def test_a_selector_by_name_prefix_reads_many_journals_from_one_listing(spark, broker, client, create_journal):
    tag = uuid.uuid4().hex[:6]
    names = [f"store/many-{tag}/j{i}" for i in range(5)]
    for n in names:
        create_journal(n, length=1024)
        fill(client, broker, n, batches=4, per_batch=20)
    create_journal(f"store/other-{tag}", length=1024)  # outside the prefix: not read
    fill(client, broker, f"store/other-{tag}", batches=4, per_batch=20)
    ends = {n: persisted_end(client, n) for n in names}
    df = store_reader(spark, broker, selector=f"name:prefix=store/many-{tag}/", framing="ndjson").load()
    want = reader(
        spark, broker, selector=f"name:prefix=store/many-{tag}/", endingOffsets=str(ends).replace("'", '"')
    ).load()
    got = rows(df)
    assert got == rows(want)
    assert {r[0] for r in got} == set(names)


def test_a_path_postfix_directory_is_not_part_of_the_journal_name(spark, broker, client, create_journal):
    tag = uuid.uuid4().hex[:6]
    names = [f"store/postfix-{tag}/j{i}" for i in range(2)]
    for n in names:
        create_journal(n, length=1024, template='date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}/hour=00')
        fill(client, broker, n, batches=4, per_batch=20)
    ends = {n: persisted_end(client, n) for n in names}
    want = rows(reader(spark, broker, journals=",".join(names), endingOffsets=str(ends).replace("'", '"')).load())
    # By names: the names say where the journal ends. By a prefix: the postfix depth does.
    by_name = store_reader(spark, broker, journals=",".join(names), framing="ndjson").load()
    by_prefix = store_reader(
        spark, broker, selector=f"name:prefix=store/postfix-{tag}/", framing="ndjson", **{"store.pathPostfixDepth": "2"}
    ).load()
    assert rows(by_name) == want and rows(by_prefix) == want and want


def test_overlapping_fragments_are_read_once_longest_first(spark, broker, client, create_journal):
    """A fragment the store holds twice (a shorter copy inside a longer one, as after a broker
    hand-off) gives each message once."""
    from pyspark_gazette.fragments import FragmentStore

    journal = f"store/overlap-{uuid.uuid4().hex[:6]}"
    create_journal(journal, length=1024, codec="NONE")
    fill(client, broker, journal, batches=6, per_batch=20)
    frags = [FragmentRef.from_proto(f.spec) for f in client.list_fragments(journal) if f.spec.mod_time]
    store = FragmentStore(frags[0].backing_store, file_root=broker.store_root)
    # One fragment covering the first two: what a broker that held both spools would persist.
    a, b = frags[0], frags[1]
    content = store.open_reader(a).read() + store.open_reader(b).read()
    import hashlib

    joined = FragmentRef(journal, a.begin, b.end, hashlib.sha1(content).hexdigest(), a.codec, a.backing_store)
    store.put(joined, __import__("io").BytesIO(content))
    same_as_broker(spark, broker, client, journal, framing="ndjson")


def test_s3_store_on_moto_equals_the_broker_read(spark, broker, client, create_journal, s3_server, s3_bucket):
    url = f"s3://{s3_bucket}/data/?endpoint={s3_server}"
    journal = f"store/s3-{uuid.uuid4().hex[:6]}"
    create_journal(journal, length=1024, store=url)
    fill(client, broker, journal, batches=5, per_batch=20)
    end = persisted_end(client, journal)
    df = (
        spark.read.format("gazette")
        .option("store.url", f"s3://{s3_bucket}/data/")
        .option("store.s3.endpoint", s3_server)
        .option("store.s3.accessKeyId", "testing")
        .option("store.s3.secretAccessKey", "testing")
        .option("journals", journal)
        .option("framing", "ndjson")
        .option("broker.address", NO_BROKER)
        .load()
    )
    want = reader(spark, broker, journals=journal, endingOffsets=_ending(journal, end), **S3_KEYS).load()
    assert rows(df) == rows(want) and rows(df)


# -- errors a user meets -------------------------------------------------------------------------


def _error_text(fn) -> str:
    with pytest.raises((PySparkException, Py4JJavaError)) as err:
        fn()
    return str(err.value)


def _journal_with_fragments(client, broker, create_journal, tag: str, **spec) -> tuple[str, list[FragmentRef]]:
    journal = f"store/{tag}-{uuid.uuid4().hex[:6]}"
    create_journal(journal, length=1024, **spec)
    fill(client, broker, journal, batches=12, per_batch=20)
    frags = [FragmentRef.from_proto(f.spec) for f in client.list_fragments(journal) if f.spec.mod_time]
    assert len(frags) >= 4
    return journal, frags


def _path(broker, ref: FragmentRef) -> str:
    return os.path.join(broker.store_root, "store", ref.content_path)


def test_errors_name_the_store_the_journal_and_the_option(spark, broker, client, create_journal, tmp_path):
    journal, _ = _journal_with_fragments(client, broker, create_journal, "errors")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("not a fragment")
    text = _error_text(
        lambda: (
            spark.read.format("gazette")
            .option("store.url", f"file://{empty}/")
            .option("journals", "some/journal")
            .option("framing", "ndjson")
            .load()
            .collect()
        )
    )
    assert "store.url" in text and "no fragment files under" in text and "notes.txt" not in text
    text = _error_text(lambda: store_reader(spark, broker, journals=journal + "x", framing="ndjson").load().collect())
    assert "journals" in text and repr(journal + "x") in text and f"did you mean {journal!r}" in text
    text = _error_text(lambda: store_reader(spark, broker, journals=journal).load().collect())
    assert "framing" in text and "content-type" in text
    text = _error_text(
        lambda: store_reader(spark, broker, journals=journal, framing="ndjson", signedUrls="true").load().collect()
    )
    assert "signedUrls" in text
    text = _error_text(lambda: store_reader(spark, broker, selector="app=x", framing="ndjson").load().collect())
    assert "selector" in text and "journal names only" in text


def test_a_bucket_without_credentials_is_named(broker, client, create_journal, s3_server, s3_bucket, tmp_path):
    url = f"s3://{s3_bucket}/data/?endpoint={s3_server}"
    journal = f"store/nocreds-{uuid.uuid4().hex[:6]}"
    create_journal(journal, length=1024, store=url)
    fill(client, broker, journal, batches=3, per_batch=20)
    # A Spark of its own, started without AWS credentials in its environment: the session of this
    # test process may have been started after a moto fixture put them there.
    script = tmp_path / "read.py"
    script.write_text(
        "from pyspark.sql import SparkSession\n"
        "spark = SparkSession.builder.master('local[1]').getOrCreate()\n"
        "try:\n"
        f"    spark.read.format('gazette').option('store.url', 's3://{s3_bucket}/data/')"
        f".option('store.s3.endpoint', '{s3_server}').option('journals', '{journal}')"
        ".option('framing', 'ndjson').load().collect()\n"
        "    print('NO ERROR')\n"
        "except Exception as e:\n"
        "    print(str(e))\n"
        "finally:\n"
        "    spark.stop()\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, HOME=str(tmp_path))
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    text = done.stdout + done.stderr
    assert "NO ERROR" not in done.stdout, text[-2000:]
    assert f"store.url s3://{s3_bucket}/data/" in text and "cannot be listed" in text, text[-2000:]
    assert "NoCredentialsError" in text and "read access" in text, text[-2000:]


def test_files_that_are_not_fragments_are_skipped_and_counted(spark, broker, client, create_journal):
    from pyspark_gazette.fragments import FragmentStore
    from pyspark_gazette.fragments.listing import list_store

    journal, frags = _journal_with_fragments(client, broker, create_journal, "junk")
    directory = os.path.dirname(_path(broker, frags[0]))
    for name in ("README.md", "0000-xyz.zst", "._0000000000000000-0000000000000010-" + "0" * 40 + ".raw"):
        with open(os.path.join(directory, name), "w") as f:
            f.write("junk")
    listing = list_store(FragmentStore("file:///store/", file_root=broker.store_root), journal + "/")
    assert listing.skipped == 3 and "README.md" in listing.skipped_text()
    assert [(r.begin, r.end) for r in listing.fragments[journal]] == [(r.begin, r.end) for r in frags]
    same_as_broker(spark, broker, client, journal, framing="ndjson")


def test_a_truncated_fragment_file_fails_naming_it(spark, broker, client, create_journal):
    journal, frags = _journal_with_fragments(client, broker, create_journal, "corrupt")
    path = _path(broker, frags[1])
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size // 2)
    text = _error_text(lambda: store_reader(spark, broker, journals=journal, framing="ndjson").load().collect())
    assert journal in text and frags[1].content_name in text


# -- holes ---------------------------------------------------------------------------------------


def test_a_young_hole_ends_the_read_and_is_not_called_lost(spark, broker, client, create_journal):
    journal, frags = _journal_with_fragments(client, broker, create_journal, "young-hole")
    mid = frags[2]
    os.remove(_path(broker, mid))
    got = rows(store_reader(spark, broker, journals=journal, framing="ndjson").load())
    assert got and max(r[1] for r in got) < mid.begin  # the persisted history ends at the hole
    want = rows(reader(spark, broker, journals=journal, endingOffsets=_ending(journal, mid.begin)).load())
    assert got == want
    text = _error_text(
        lambda: (
            store_reader(
                spark, broker, journals=journal, framing="ndjson", endingOffsets=_ending(journal, frags[3].end)
            )
            .load()
            .collect()
        )
    )
    assert "endingOffsets" in text and "beyond the end of its persisted history" in text
    assert f"({mid.begin})" in text and f"[{mid.begin}, {mid.end})" in text


def test_an_old_hole_is_data_loss_and_failondataloss_skips_it(spark, broker, client, create_journal):
    journal, frags = _journal_with_fragments(client, broker, create_journal, "old-hole")
    mid = frags[2]
    os.remove(_path(broker, mid))
    old = time.time() - 7 * 3600  # older than Gazette's 6 hour threshold
    for ref in frags[3:]:
        os.utime(_path(broker, ref), (old, old))
    text = _error_text(lambda: store_reader(spark, broker, journals=journal, framing="ndjson").load().collect())
    assert "DataLossError" in text or "not in any fragment" in text
    assert f"[{mid.begin}, {mid.end})" in text and "failOnDataLoss" in text
    got = rows(store_reader(spark, broker, journals=journal, framing="ndjson", failOnDataLoss="false").load())
    offsets = [r[1] for r in got]
    assert offsets and not any(mid.begin <= o < mid.end for o in offsets)
    assert max(offsets) >= frags[-1].begin  # read on past the lost hole
    before = rows(reader(spark, broker, journals=journal, endingOffsets=_ending(journal, mid.begin)).load())
    assert got[: len(before)] == before


# -- streams -------------------------------------------------------------------------------------


def _store_stream(spark, broker, **options):
    r = (
        spark.readStream.format("gazette")
        .option("store.url", "file:///store/")
        .option("store.fileRoot", broker.store_root)
        .option("framing", "ndjson")
        .option("startingOffsets", "earliest")
    )
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def _available_now(df, fmt: str, checkpoint, **options):
    w = df.writeStream.format(fmt).option("checkpointLocation", str(checkpoint)).trigger(availableNow=True)
    for k, v in options.items():
        w = w.option(k, v)
    q = w.start()
    q.awaitTermination()
    assert q.exception() is None, q.exception()


def test_a_stream_from_the_store_reads_new_fragments_once_into_a_file_sink(
    spark, broker, client, create_journal, tmp_path
):
    journal = f"store/stream-{uuid.uuid4().hex[:6]}"
    create_journal(journal, length=1024)
    lines = fill(client, broker, journal, batches=6, per_batch=20)
    df = _store_stream(spark, broker, journals=journal, maxBytesPerTrigger="2k").select("journal", "offset", "value")
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    _available_now(df, "parquet", ckpt, path=str(out))
    first_end = persisted_end(client, journal)
    got = sorted((r.offset, r.value) for r in spark.read.parquet(str(out)).collect())
    assert got == [(o, v.decode()) for o, v in lines if o < first_end]

    # New fragments appear in the store: the next run reads them, and only them.
    more = []
    for b in range(6, 12):
        data = ndjson(events(20, b * 20))
        commit = client.append(journal, data)
        pos = commit.begin
        for line in data.splitlines(keepends=True):
            more.append((pos, line.rstrip(b"\n")))
            pos += len(line)
    assert broker.wait_persisted(30)
    _available_now(df, "parquet", ckpt, path=str(out))
    second_end = persisted_end(client, journal)
    assert second_end > first_end
    got = sorted((r.offset, r.value) for r in spark.read.parquet(str(out)).collect())
    assert got == [(o, v.decode()) for o, v in lines + more if o < second_end]
    # Nothing new: a third run adds nothing.
    _available_now(df, "parquet", ckpt, path=str(out))
    assert spark.read.parquet(str(out)).count() == len(got)


def test_a_stream_from_the_store_into_the_exactly_once_sink(spark, broker, client, create_journal, tmp_path):
    journal = f"store/stream-src-{uuid.uuid4().hex[:6]}"
    sink = f"store/stream-dst-{uuid.uuid4().hex[:6]}"
    create_journal(journal, length=1024)
    create_journal(sink)
    lines = fill(client, broker, journal, batches=8, per_batch=20)
    end = persisted_end(client, journal)
    df = _store_stream(spark, broker, journals=journal).select("value")
    ckpt = tmp_path / "ckpt"
    for _ in range(2):  # the second run from the same checkpoint adds nothing
        _available_now(df, "gazette", ckpt, **{"broker.address": broker.address, "journal": sink})
    got = reader(spark, broker, journals=sink).load().collect()
    assert sorted(r.value for r in got) == sorted(v.decode() for o, v in lines if o < end)


def test_a_stream_waits_at_a_young_hole_and_reads_on_once_it_is_filled(spark, broker, client, create_journal, tmp_path):
    journal, frags = _journal_with_fragments(client, broker, create_journal, "stream-hole")
    mid = frags[2]
    path = _path(broker, mid)
    os.rename(path, path + ".aside")  # an upload still in flight, as the store sees it
    df = _store_stream(spark, broker, journals=journal).select("offset", "value")
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    _available_now(df, "parquet", ckpt, path=str(out))
    first = sorted(r.offset for r in spark.read.parquet(str(out)).collect())
    assert first and max(first) < mid.begin
    os.rename(path + ".aside", path)
    _available_now(df, "parquet", ckpt, path=str(out))
    got = sorted(r.offset for r in spark.read.parquet(str(out)).collect())
    want = rows(reader(spark, broker, journals=journal, endingOffsets=_ending(journal, frags[-1].end)).load())
    assert got == [r[1] for r in want]  # every message once, the hole's included
