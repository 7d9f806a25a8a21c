"""Messages inside journals: framings, Gazette message UUIDs, read-committed sequencing.

Pure Python (plus numpy/pyarrow for the vectorised line splitter); no pyspark, no fsspec.
The Arrow helpers (:func:`split_lines_arrow`, :class:`ArrowLineDecoder`, :class:`LineBatch`)
are imported on first use, so the broker and client do not pay for importing pyarrow.
"""

from __future__ import annotations

from typing import Any

from pyspark_gazette.message.envelope import Envelope, Outcome
from pyspark_gazette.message.framing import (
    CSV,
    FIXED_MAGIC,
    FRAMINGS,
    LINES,
    NDJSON,
    PROTOBUF_FIXED,
    CSVFraming,
    Decoder,
    FixedDecoder,
    Framing,
    LinesFraming,
    NDJSONFraming,
    ProtobufFixedFraming,
    document_framings,
    framing_by_name,
    framing_for_content_type,
    framings,
    register_framing,
    unregister_framing,
)
from pyspark_gazette.message.sequencer import Sequencer
from pyspark_gazette.message.uuids import (
    DEFAULT_UUID_POINTER,
    GREGORIAN_OFFSET,
    NIL_UUID,
    TICK,
    Flags,
    TransactionalPublisher,
    build_uuid,
    clock_from_unix,
    clock_now,
    clock_to_micros,
    clock_to_unix,
    extract_uuid_json,
    extract_uuid_proto,
    get_clock,
    get_flags,
    get_producer,
    get_uuid_at,
    new_producer_id,
    parse_uuid,
    set_uuid_at,
    tick,
)

__all__ = [
    "CSV",
    "DEFAULT_UUID_POINTER",
    "FIXED_MAGIC",
    "FRAMINGS",
    "GREGORIAN_OFFSET",
    "LINES",
    "NDJSON",
    "NIL_UUID",
    "PROTOBUF_FIXED",
    "TICK",
    "ArrowLineDecoder",
    "CSVFraming",
    "Decoder",
    "Envelope",
    "FixedDecoder",
    "Flags",
    "Framing",
    "LineBatch",
    "LinesFraming",
    "NDJSONFraming",
    "Outcome",
    "ProtobufFixedFraming",
    "Sequencer",
    "TransactionalPublisher",
    "build_uuid",
    "clock_from_unix",
    "clock_now",
    "clock_to_micros",
    "clock_to_unix",
    "extract_uuid_json",
    "extract_uuid_proto",
    "document_framings",
    "framing_by_name",
    "framing_for_content_type",
    "framings",
    "register_framing",
    "unregister_framing",
    "get_clock",
    "get_flags",
    "get_producer",
    "get_uuid_at",
    "new_producer_id",
    "parse_uuid",
    "set_uuid_at",
    "split_lines_arrow",
    "tick",
]

_ARROW_NAMES = ("ArrowLineDecoder", "LineBatch", "split_lines_arrow")


def __getattr__(name: str) -> Any:
    if name in _ARROW_NAMES:
        from pyspark_gazette.message import arrow

        return getattr(arrow, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
