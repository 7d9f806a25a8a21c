"""The ``gazette`` Spark data source (``DefaultSource``).

``spark.read.format("gazette")``, ``spark.readStream.format("gazette")`` and
``df.write.format("gazette")``. The
source is found automatically after ``pip install`` (Spark imports ``pyspark_*`` modules that
define ``DefaultSource``), or registered by class with
``spark.dataSource.register(GazetteDataSource)``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from pyspark_gazette.client import JournalClient
from pyspark_gazette.errors import GazetteError, InvalidInputError, OptionError
from pyspark_gazette.message import framing_by_name
from pyspark_gazette.spark import lineage
from pyspark_gazette.spark.options import OPTIONS, READ, STREAM, WRITE, ReadOptions, WriteOptions, catalog
from pyspark_gazette.spark.read.arrow_output import untyped_schema
from pyspark_gazette.spark.read.batch_scan import (
    FlowPushdownBatchReader,
    GazetteBatchReader,
    GazettePushdownBatchReader,
)
from pyspark_gazette.spark.read.flow import collection_schema, with_flow_columns
from pyspark_gazette.spark.read.infer import infer_schema
from pyspark_gazette.spark.read.stream import GazetteStreamReader
from pyspark_gazette.spark.resolve import framing_of, resolve_journals
from pyspark_gazette.spark.surface import plain
from pyspark_gazette.spark.worker_gc import settle
from pyspark_gazette.spark.write.batch import GazetteBatchWriter
from pyspark_gazette.spark.write.stream import GazetteStreamWriter, stream_write_options

_STREAM_ONLY = {o.key.lower() for o in OPTIONS if o.scopes == frozenset({STREAM})}

#: Spark gave a schema and no option at all, and the options (file, environment) were not enough.
#: That is a catalog table created with a column list: Spark (4.3) then never calls the source at
#: CREATE TABLE (the schema is given) and hands reads and INSERTs only the query's own options
#: (``WITH (...)``), never the table's OPTIONS or TBLPROPERTIES (docs/sql.md).
NO_OPTIONS = (
    "no options reached the gazette data source, which is what Spark does with a table created with a "
    "column list (CREATE TABLE t (...) USING gazette OPTIONS (...) keeps its OPTIONS from the connector): "
    "create the table without a column list (CREATE TABLE t USING gazette OPTIONS (journals '...', "
    "`broker.address` '...')), or give the options with each query (SELECT ... FROM t WITH ('journals' = "
    "'...', 'broker.address' = '...'); INSERT INTO t WITH ('journal' = '...', 'broker.address' = '...') ...)"
)


class GazetteDataSource(DataSource):
    """Gazette journals as a Spark data source: batch and streaming reads, batch writes."""

    def __init__(self, options: dict[str, str]) -> None:
        settle()  # Spark's first entry in the worker that creates the source (see worker_gc)
        super().__init__(options)

    @classmethod
    def name(cls) -> str:
        return "gazette"

    def _options(self, scope: str, schema: StructType | None) -> dict[str, str]:
        """The options of this query: a catalog table's ``OPTIONS`` when Spark passes its
        properties (``CREATE TABLE``), else the query's over those stashed in a table's schema
        (see :mod:`~pyspark_gazette.spark.options.catalog`)."""
        if catalog.is_catalog(self.options):
            return catalog.catalog_options(self.options)
        return catalog.table_options(self.options, schema, scope)

    def _read_options(self, *, streaming: bool | None = None, schema: StructType | None = None) -> ReadOptions:
        options = self._options(STREAM if streaming else READ, schema)
        if streaming is None:
            streaming = any(k.lower() in _STREAM_ONLY for k in options)
        try:
            return ReadOptions.parse(options, streaming=streaming)
        except OptionError:
            self._check_options_reached(schema)
            raise

    def _check_options_reached(self, schema: StructType | None) -> None:
        """Raise :data:`NO_OPTIONS` when Spark gave a schema but no option at all (a table with a
        column list), rather than the first option found missing."""
        if schema is not None and not self.options and not catalog.stashed(schema):
            raise InvalidInputError(NO_OPTIONS) from None

    @plain
    def schema(self) -> StructType:
        opts = self._read_options()
        schema = self._infer_schema(opts)
        if catalog.is_catalog(self.options):
            # CREATE TABLE: the only time Spark shows us the table's options; keep them with it.
            schema = catalog.stash(lineage.unmark(schema), catalog.catalog_options(self.options))
        elif catalog.is_write_target(self.options):
            schema = catalog.nullable(lineage.unmark(schema))  # a view for INSERT INTO v (value) ...
        return schema

    def _infer_schema(self, opts: ReadOptions) -> StructType:
        """The read's schema; the connector's own columns marked with what they were read from
        (:mod:`~pyspark_gazette.spark.lineage`), the documents' columns left as inferred."""
        read = lineage.read_of(opts.connection.address, opts.journals, opts.selector, self.options, opts.collection)
        if opts.collection:
            flow = lineage.mark(_collection_schema(opts), read)
            return with_flow_columns(infer_schema(opts), flow) if opts.infer_schema else flow
        if opts.infer_schema:
            return infer_schema(opts)
        if opts.framing != "auto":
            text = framing_by_name(opts.framing).text
        else:
            with JournalClient(opts.connection.client_config()) as client:
                infos = resolve_journals(client, opts.journals, opts.selector)
            framings = {framing_of(i, opts.framing) for i in infos}
            # No journal matches yet (a selector for journals to come): text values.
            text = all(f.text for f in framings)
        return lineage.mark(untyped_schema(text, opts.include_metadata), read)

    @plain
    def reader(self, schema: StructType) -> DataSourceReader:
        opts = self._read_options(streaming=False, schema=schema)
        cls = GazettePushdownBatchReader if opts.filter_pushdown else GazetteBatchReader
        if opts.collection and opts.filter_pushdown:
            cls = FlowPushdownBatchReader
        return cls(opts, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        try:
            return GazetteStreamReader(self._read_options(streaming=True, schema=schema), schema)
        except GazetteError as e:
            # Spark's stream runner cannot report an error raised here (it then fails on its own
            # clean-up with an UnboundLocalError that hides ours): report it from the first call.
            return _FailedStreamReader(e)

    @plain
    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        try:
            opts = WriteOptions.parse(self._options(WRITE, schema))
            return GazetteBatchWriter(opts, schema, overwrite, self._reads(opts, schema))
        except OptionError:
            self._check_options_reached(schema)
            raise

    @plain
    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        try:
            opts = stream_write_options(self._options(WRITE, schema))
            checkpoint = next((v for k, v in self.options.items() if k.lower() == "checkpointlocation"), None)
            return GazetteStreamWriter(opts, schema, overwrite, self._reads(opts, schema), checkpoint)
        except OptionError:
            self._check_options_reached(schema)
            raise

    def _reads(self, opts: WriteOptions, schema: StructType) -> tuple[tuple[str, lineage.Read], ...]:
        """The gazette reads the write's columns come from (none with ``allowWriteToSource``)."""
        return () if opts.allow_write_to_source else lineage.marks(schema, self.options)


def _collection_schema(opts: ReadOptions) -> StructType:
    """The default schema of a ``collection`` read, from its journals' partition labels."""
    with JournalClient(opts.connection.client_config()) as client:
        infos = resolve_journals(client, opts.journals, opts.selector)
    return collection_schema([(lb.name, lb.value) for lb in i.spec.labels.labels] for i in infos)


class _FailedStreamReader(DataSourceStreamReader):
    """A stream reader whose construction failed: every call raises that error (with its own
    message first, no chained context)."""

    def __init__(self, error: Exception):
        self.error = error

    def _fail(self) -> Any:
        raise self.error.with_traceback(None) from None

    def initialOffset(self) -> dict:  # noqa: N802
        return self._fail()

    def latestOffset(self, start: dict | None = None, limit: Any = None) -> dict:  # noqa: N802
        return self._fail()

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        return self._fail()

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return self._fail()

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        pass
