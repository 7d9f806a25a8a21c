"""The parsed options of one query: :class:`ReadOptions` and :class:`WriteOptions` (frozen, pickled to executors)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from pyspark_gazette.errors import OptionError, SelectorError, SpecError
from pyspark_gazette.message import document_framings, framing_by_name
from pyspark_gazette.protocol.journal_names import base_journal, validate_journal_name
from pyspark_gazette.protocol.labels import parse_selector
from pyspark_gazette.spark.options.connection import Connection, connection_from
from pyspark_gazette.spark.options.flow import collection_values, with_hosted
from pyspark_gazette.spark.options.parsing import DEFAULTS, check_offsets_name_read_journals, parse
from pyspark_gazette.spark.options.table import READ, STREAM, WRITE
from pyspark_gazette.spark.options.templates import spec_template


@dataclasses.dataclass(frozen=True)
class ReadOptions:
    """Parsed options of a batch or streaming read."""

    connection: Connection
    journals: tuple[str, ...]
    selector: str | None
    starting_offsets: str | dict[str, int] | None
    ending_offsets: str | dict[str, int]
    starting_timestamp: int | None
    ending_timestamp: int | None
    framing: str
    mode: str
    corrupt_column: str
    include_metadata: bool
    uuid_pointer: str
    read_committed: bool
    max_partition_bytes: int
    direct_reads: bool
    signed_urls: bool
    verify_sha1: bool
    fail_on_data_loss: bool
    #: ``holeAgeThreshold`` in seconds (client/settle.py).
    hole_age_threshold: float = 6 * 3600.0
    filter_pushdown: bool = False
    max_bytes_per_trigger: int | None = None
    min_bytes_per_trigger: int | None = None
    max_trigger_delay: float = 900.0
    read_committed_lookback: int = 64 << 20
    open_cost_bytes: int = 256 << 10
    min_partitions: int | None = None
    uuid_field: int = 0
    watch_write_heads: str = "auto"  # auto | true | false
    collection: str | None = None  # an Estuary Flow collection (spark/options/flow.py)
    control_documents: bool = False  # with collection: return Flow's control documents too
    infer_schema: bool = False
    sampling_bytes: int = 4 << 20

    @property
    def offset_bounds(self) -> tuple[str | dict[str, int] | None, str | dict[str, int]]:
        """(``startingOffsets``, ``endingOffsets``) as given, for checks against the journals read."""
        return self.starting_offsets, self.ending_offsets

    @classmethod
    def parse(
        cls, options: Mapping[str, str], *, streaming: bool = False, env: Mapping[str, str] | None = None
    ) -> ReadOptions:
        v = collection_values(options, parse(options, STREAM if streaming else READ, env))
        journals = tuple(j.strip() for j in (v.get("journals") or "").split(",") if j.strip())
        if bool(journals) == bool(v.get("selector")):
            raise OptionError(
                "journals",
                "give exactly one of journals (or a load() path) and selector"
                if journals
                else "is required: give journals (comma-separated names, or a load() path) or a selector",
            )
        if v.get("selector"):
            try:
                parse_selector(v["selector"])
            except SelectorError as e:
                raise OptionError("selector", str(e)) from None
        if not v["uuidPointer"].startswith("/"):
            raise OptionError("uuidPointer", f"a JSON pointer starts with '/', got {v['uuidPointer']!r}")
        if not 0 <= v["uuidField"] <= 536_870_911:
            raise OptionError("uuidField", f"a protobuf field number is 1 to 536870911 (0: none), got {v['uuidField']}")
        max_bytes = v.get("maxBytesPerTrigger")
        if v.get("maxOffsetsPerTrigger") is not None:
            raise OptionError(
                "maxOffsetsPerTrigger",
                "is not supported: in Kafka it counts records, but Gazette offsets are bytes; "
                "limit micro-batches by bytes with maxBytesPerTrigger (e.g. 64m) instead",
            )
        start_ts, end_ts = v.get("startingTimestamp"), v.get("endingTimestamp")
        if start_ts is not None and end_ts is not None and end_ts < start_ts:
            raise OptionError("endingTimestamp", f"{end_ts} is before startingTimestamp {start_ts}")
        starting = v.get("startingOffsets")
        ending = v.get("endingOffsets", DEFAULTS["endingOffsets"])
        if ending == "earliest":
            raise OptionError(
                "endingOffsets", "must be latest or a JSON object of offsets (earliest would read nothing)"
            )
        if isinstance(ending, dict) and any(o == -2 for o in ending.values()):
            raise OptionError("endingOffsets", "-2 (earliest) is not allowed as an ending offset")
        if isinstance(starting, dict) and isinstance(ending, dict):
            for journal, start in starting.items():
                end = ending.get(journal, -1)
                if start >= 0 and end >= 0 and end < start:
                    raise OptionError("endingOffsets", f"journal {journal!r} ends at {end}, before its start {start}")
        if journals:
            bad = [j for j in journals if not _valid_journal(j)]
            if bad:
                raise OptionError("journals", f"invalid journal name(s): {', '.join(map(repr, bad))}")
            check_offsets_name_read_journals(starting, ending, {*journals, *map(base_journal, journals)})
        return cls(
            connection=with_hosted(connection_from(v), v),
            journals=journals,
            selector=v.get("selector"),
            starting_offsets=starting,
            ending_offsets=ending,
            starting_timestamp=start_ts,
            ending_timestamp=end_ts,
            framing=v["framing"],
            mode=v["mode"],
            corrupt_column=v["columnNameOfCorruptRecord"],
            include_metadata=v["includeMetadata"],
            uuid_pointer=v["uuidPointer"],
            read_committed=v["readCommitted"],
            max_partition_bytes=v["maxPartitionBytes"],
            direct_reads=v["directReads"],
            signed_urls=v["signedUrls"],
            verify_sha1=v["verifySha1"],
            fail_on_data_loss=v["failOnDataLoss"],
            hole_age_threshold=v.get("holeAgeThreshold", DEFAULTS["holeAgeThreshold"]),
            filter_pushdown=bool(v.get("filterPushdown")),
            max_bytes_per_trigger=max_bytes,
            min_bytes_per_trigger=v.get("minBytesPerTrigger"),
            max_trigger_delay=v.get("maxTriggerDelay", DEFAULTS["maxTriggerDelay"]),
            read_committed_lookback=v.get("readCommittedLookbackBytes", DEFAULTS["readCommittedLookbackBytes"]),
            open_cost_bytes=v.get("openCostInBytes", DEFAULTS["openCostInBytes"]),
            min_partitions=_min_partitions(v.get("minPartitions")),
            uuid_field=v["uuidField"],
            watch_write_heads=v.get("watchWriteHeads", DEFAULTS["watchWriteHeads"]),
            collection=v.get("collection"),
            control_documents=bool(v.get("collection.controlDocuments")),
            infer_schema=bool(v.get("inferSchema")),
            sampling_bytes=v.get("samplingBytes", DEFAULTS["samplingBytes"]),
        )


def _valid_journal(journal: str) -> bool:
    """Whether ``journal`` (a ``;meta`` suffix stripped) is a journal name by Gazette's rules."""
    try:
        validate_journal_name(base_journal(journal))
    except SpecError:
        return False
    return True


def _min_partitions(value: int | None) -> int | None:
    if value is not None and value < 1:
        raise OptionError("minPartitions", f"must be at least 1, got {value}")
    return value


@dataclasses.dataclass(frozen=True)
class WriteOptions:
    """Parsed options of a batch or streaming write."""

    connection: Connection
    journal: str | None
    framing: str
    transactional: bool
    uuid_pointer: str
    create_journals: str | None
    max_batch_bytes: int
    allow_write_to_source: bool = False
    #: ``commitWhen``: wait until the appends are persisted (``persisted``) before committing.
    persisted: bool = False

    @classmethod
    def parse(cls, options: Mapping[str, str], *, env: Mapping[str, str] | None = None) -> WriteOptions:
        v = parse(options, WRITE, env)
        if not v["uuidPointer"].startswith("/"):
            raise OptionError("uuidPointer", f"a JSON pointer starts with '/', got {v['uuidPointer']!r}")
        if v["transactional"] and v["framing"] != "auto" and not framing_by_name(v["framing"]).json_documents:
            raise OptionError(
                "transactional",
                f"needs {document_framings()} framing (message UUIDs live in JSON documents), not {v['framing']}",
            )
        if v.get("createJournals"):
            spec_template(v["createJournals"])  # validate now, at planning time
        return cls(
            connection=connection_from(v),
            journal=v.get("journal"),
            framing=v["framing"],
            transactional=v["transactional"],
            uuid_pointer=v["uuidPointer"],
            create_journals=v.get("createJournals"),
            max_batch_bytes=v["maxBatchBytes"],
            allow_write_to_source=v["allowWriteToSource"],
            persisted=v["commitWhen"] == "persisted",
        )
