"""A framing registered from outside the package is written and read end to end: nothing in
``spark/`` or ``client/`` names a framing, so a registered one (tests/framing_plugin.py: binary,
not line-based, an overhead that depends on the payload's length) works through the journal's
content-type label. The data source's driver and executor halves run in this process (Spark's
planning and executor workers are other Python processes, which would have to import the
plugin themselves); both brokers (the ``backend`` fixture)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

import framing_plugin
from journalspecs import make_spec
from pyspark_gazette.message import framing_for_content_type, register_framing, unregister_framing
from pyspark_gazette.spark.options import ReadOptions, WriteOptions
from pyspark_gazette.spark.read.batch_scan import read_partition
from pyspark_gazette.spark.source import GazetteDataSource
from pyspark_gazette.spark.write.batch import GazetteBatchWriter

JOURNAL = "plugin/varint"
VARINT = framing_plugin.VARINT
# Payloads around the varint's one/two-byte boundary (127/128), some holding newlines.
PAYLOADS = [bytes([i]) * n + b"\n" for i, n in enumerate([0, 1, 126, 127, 128, 300, 5, 3000])]


@pytest.fixture
def varint():
    register_framing(VARINT)
    yield VARINT
    unregister_framing(VARINT)


@pytest.fixture
def client(backend):
    with backend.client() as c:
        yield c


def write(backend, batch: pa.RecordBatch) -> None:
    opts = WriteOptions.parse({"broker.address": backend.address, "journal": JOURNAL}, env={})
    writer = GazetteBatchWriter(opts, StructType([StructField("value", BinaryType())]), False)
    writer.commit([writer.write(iter([batch]))])


def read(backend, **options) -> list[tuple[int, bytes]]:
    source = GazetteDataSource({"broker.address": backend.address, "store.fileRoot": backend.file_root, **options})
    schema = source.schema()
    reader = source.reader(schema)
    opts = ReadOptions.parse(source.options, env={})
    out = []
    for part in reader.partitions():
        for batch in read_partition(part, opts, schema):
            assert batch.schema.field("value").type == pa.binary()  # not text: a binary column
            out += zip(batch.column("offset").to_pylist(), batch.column("value").to_pylist(), strict=True)
    return out


def test_a_registered_framing_is_written_and_read_through_the_data_source(backend, client, varint):
    backend.create(client, [make_spec(JOURNAL, length=1024, content_type=varint.content_type)])
    assert framing_for_content_type(varint.content_type) == varint
    write(backend, pa.record_batch([pa.array(PAYLOADS[:5], pa.binary())], names=["value"]))
    write(backend, pa.record_batch([pa.array(PAYLOADS[5:], pa.binary())], names=["value"]))
    assert client.read_all(JOURNAL) == b"".join(framing_plugin.varint(len(p)) + p for p in PAYLOADS)

    offsets, pos = [], 0
    for p in PAYLOADS:
        offsets.append(pos)
        pos += varint.framed_size(len(p))
    assert read(backend, journals=JOURNAL) == list(zip(offsets, PAYLOADS, strict=True))
    # A start at a message boundary inside the journal reads the rest, each message whole.
    start = f'{{"{JOURNAL}": {offsets[3]}}}'
    assert read(backend, journals=JOURNAL, startingOffsets=start) == list(zip(offsets[3:], PAYLOADS[3:], strict=True))
