"""Same-run floors for the Spark read and write benches: Python data sources doing no work.

``arrowfloor`` (read): yields ready-made Arrow record batches from Arrow IPC files, one file
per partition, batch for batch. The read bench fills those files with exactly the batches our
reader produces for each of its partitions (run in the bench process), so a query over
``arrowfloor`` pays everything Spark charges a Python data source for that output (task
launch, the Python worker, Arrow into the JVM, rows) and nothing of ours (no store, no
decompression, no line splitting, no JSON): ours / floor is how close the reader is to the
limit that binds.

``discard`` (write): a ``DataSourceArrowWriter`` that receives the same DataFrame as our writer
(Spark's JVM -> Python Arrow hand-off) and drops every batch, counting rows.

Both classes must be importable by the Python workers: the benches put this directory on
``PYTHONPATH`` before the session starts and register the sources by class.
"""

from __future__ import annotations

import dataclasses
import json
import os

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from pyspark_gazette.spark.read.partition_reader import TYPED_PARSE_ENV
from pyspark_gazette.spark.read.typed import NATIVE_ENV
from pyspark_gazette.spark.source import GazetteDataSource
from pyspark_gazette.spark.worker_gc import FREEZE_ENV


def _joined(batches: list[pa.RecordBatch]) -> pa.RecordBatch:
    if len(batches) == 1:
        return batches[0]
    return pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def dump_partitions(directory: str, partitions, combine: int = 1) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    """Write each partition's batches (an iterable of iterables of record batches) to
    ``directory/part-NNNNN.arrow``, batch for batch, or ``combine`` batches joined into one;
    returns (rows, batches written)."""
    os.makedirs(directory, exist_ok=True)
    rows = written = 0
    for i, batches in enumerate(partitions):
        groups: list[list[pa.RecordBatch]] = [[]]
        for b in batches:
            if len(groups[-1]) >= combine:
                groups.append([])
            groups[-1].append(b)
            rows += b.num_rows
        if not groups[0]:
            continue
        with pa.OSFile(os.path.join(directory, f"part-{i:05d}.arrow"), "wb") as sink:
            with pa.ipc.new_file(sink, groups[0][0].schema) as w:
                for g in groups:
                    w.write_batch(_joined(g))
                    written += 1
    return rows, written


class _FloorReader(DataSourceReader):
    def __init__(self, path: str):
        self.path = path

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(os.path.join(self.path, f)) for f in sorted(os.listdir(self.path))]

    def read(self, partition):  # type: ignore[no-untyped-def]
        with pa.memory_map(partition.value) as src:
            reader = pa.ipc.open_file(src)
            for i in range(reader.num_record_batches):
                yield reader.get_batch(i)


class ArrowFloorDataSource(DataSource):
    """``spark.read.format("arrowfloor").option("path", dir).option("schema", schema.json())``."""

    @classmethod
    def name(cls) -> str:
        return "arrowfloor"

    def schema(self) -> StructType:
        return StructType.fromJson(json.loads(self.options["schema"]))

    def reader(self, schema: StructType) -> DataSourceReader:
        return _FloorReader(self.options["path"])


@dataclasses.dataclass(frozen=True)
class _Rows(WriterCommitMessage):
    rows: int


class _DiscardWriter(DataSourceArrowWriter):
    def write(self, iterator):  # type: ignore[no-untyped-def]
        return _Rows(sum(batch.num_rows for batch in iterator))

    def commit(self, messages) -> None:  # type: ignore[no-untyped-def]
        pass

    def abort(self, messages) -> None:  # type: ignore[no-untyped-def]
        pass


class DiscardDataSource(DataSource):
    """``df.write.format("discard").mode("append").save()``: receives the rows, keeps nothing."""

    @classmethod
    def name(cls) -> str:
        return "discard"

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceArrowWriter:
        return _DiscardWriter()


def register(spark) -> None:  # type: ignore[no-untyped-def]
    spark.dataSource.register(ArrowFloorDataSource)
    spark.dataSource.register(DiscardDataSource)


def _register_with_env(spark, source, name: str, value: str) -> str:  # type: ignore[no-untyped-def]
    """Register ``source`` with ``name=value`` in its Python workers' environment: a source's
    environment is the SparkContext's at registration, and workers with another environment
    are other processes. So one Spark session compares the same read two ways."""
    env = spark.sparkContext.environment
    env[name] = value
    try:
        spark.dataSource.register(source)
    finally:
        del env[name]
    return source.name()


def register_pure_python(spark) -> str:  # type: ignore[no-untyped-def]
    """The gazette source again as ``gazette_purepython``, whose Python workers run with the C
    JSON scanner turned off (``PYSPARK_GAZETTE_NATIVE_JSON=0``). Returns the name."""
    return _register_with_env(spark, GazettePurePython, NATIVE_ENV, "0")


def register_unfrozen(spark) -> str:  # type: ignore[no-untyped-def]
    """The gazette source again as ``gazette_unfrozen``, whose Python workers leave the garbage
    collector alone (``PYSPARK_GAZETTE_FREEZE_IMPORTS=0``: pyspark's daemon then collects
    every object of the imports after each task). Returns the name."""
    return _register_with_env(spark, GazetteUnfrozen, FREEZE_ENV, "0")


#: (z): the typed parse unit (``PYSPARK_GAZETTE_TYPED_PARSE_BYTES``; also the size of the Arrow
#: batches handed to Spark), MiB -> the source registered with it.
PARSE_UNITS_MIB = (1, 4, 32)


def register_parse_units(spark) -> dict[int, str]:  # type: ignore[no-untyped-def]
    """The gazette source again once per :data:`PARSE_UNITS_MIB`, as ``gazette_parse<N>m`` with
    ``PYSPARK_GAZETTE_TYPED_PARSE_BYTES`` set in its workers. Returns MiB -> name."""
    return {
        mib: _register_with_env(spark, cls, TYPED_PARSE_ENV, str(mib << 20))
        for mib, cls in zip(PARSE_UNITS_MIB, (GazetteParse1M, GazetteParse4M, GazetteParse32M), strict=True)
    }


def _renamed(cls_name: str, source_name: str) -> type[GazetteDataSource]:
    """The gazette source under another name, as a class of this module (so Spark's workers
    import it by reference, like the source itself)."""

    def name(cls) -> str:  # type: ignore[no-untyped-def]
        return source_name

    doc = f"The gazette source registered as ``{source_name}`` (see the ``register_*`` functions)."
    return type(cls_name, (GazetteDataSource,), {"name": classmethod(name), "__module__": __name__, "__doc__": doc})


GazetteParse1M = _renamed("GazetteParse1M", "gazette_parse1m")
GazetteParse4M = _renamed("GazetteParse4M", "gazette_parse4m")
GazetteParse32M = _renamed("GazetteParse32M", "gazette_parse32m")
GazettePurePython = _renamed("GazettePurePython", "gazette_purepython")
GazetteUnfrozen = _renamed("GazetteUnfrozen", "gazette_unfrozen")
