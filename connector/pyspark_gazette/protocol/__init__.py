"""Gazette broker protocol: generated messages plus small helpers beside them.

``pb`` is the generated message module (``protocol_pb2``); ``pb_grpc`` the generated gRPC
stubs. Behaviour lives in this package's sibling modules, never in the generated code.
"""

from __future__ import annotations

from pyspark_gazette.protocol._gen import protocol_pb2 as pb
from pyspark_gazette.protocol._gen import protocol_pb2_grpc as pb_grpc
from pyspark_gazette.protocol.conversions import (
    CODEC_NAMES,
    MAX_READ_CHUNK,
    RATE_ABORT_TEXT,
    codec_from_name,
    codec_name,
    label_set,
    labels_to_dict,
    sha1sum_from_digest,
    sha1sum_from_hex,
    sha1sum_to_digest,
    sha1sum_to_hex,
    status_name,
)

__all__ = [
    "CODEC_NAMES",
    "MAX_READ_CHUNK",
    "RATE_ABORT_TEXT",
    "codec_from_name",
    "codec_name",
    "label_set",
    "labels_to_dict",
    "pb",
    "pb_grpc",
    "sha1sum_from_digest",
    "sha1sum_from_hex",
    "sha1sum_to_digest",
    "sha1sum_to_hex",
    "status_name",
]
