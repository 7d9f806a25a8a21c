"""Flow's collection labels and logical-partition value encoding (see docs/flow.md, "Labels").

Flow labels every journal of a collection with ``estuary.dev/collection=<collection name>`` and,
for each logical partition field ``f``, ``estuary.dev/field/<f>=<encoded value>``; the journal name
is the collection's partition-template name followed by ``<f>=<encoded value>/`` per field (in
field order) and ``pivot=<key begin>``. Values are encoded as:

- ``null`` -> ``%_null``; ``true`` / ``false`` -> ``%_true`` / ``%_false``;
- integers -> ``%_`` and their base-10 digits (``%_-1234``);
- strings -> percent-encoded (a string can never begin with ``%_``, so decoding is unambiguous).

Flow selects a collection's journals with the collection label plus a ``name:prefix`` of the
template name and ``/``, and narrows them with partition selectors (``include`` / ``exclude``
maps of field to values), encoded the same way.

When a backfill begins, Flow labels the collection's journals ``estuary.dev/truncated-at=<clock>``:
the message-UUID clock of the backfill's start as 16 lowercase hex digits (fixed width, so the
text orders as the number). Documents of the journal published before that clock are no longer
part of the collection; an absent label truncates nothing (:func:`truncated_at`).
"""

from __future__ import annotations

import json
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import Any

from pyspark_gazette.errors import OptionError

COLLECTION = "estuary.dev/collection"
FIELD_PREFIX = "estuary.dev/field/"
KEY_BEGIN = "estuary.dev/key-begin"
KEY_END = "estuary.dev/key-end"
TRUNCATED_AT = "estuary.dev/truncated-at"
#: The last path segment of a Flow journal name: ``pivot=<key begin, hex>``.
PIVOT = "pivot"

_TYPED = "%_"


class PartitionValueError(ValueError):
    """A label value that is not Flow's encoding of a partition value."""


def encode_value(value: Any) -> str:
    """Flow's encoding of a logical partition value (null, bool, integer or string)."""
    if value is None:
        return "%_null"
    if value is True:
        return "%_true"
    if value is False:
        return "%_false"
    if isinstance(value, int):
        return f"{_TYPED}{value}"
    if isinstance(value, str):
        # Python never escapes "~", which a Gazette label value may not hold.
        return urllib.parse.quote(value, safe="-._").replace("~", "%7E")
    raise PartitionValueError(f"a partition value is null, a boolean, an integer or a string, not {value!r}")


def decode_value(text: str) -> Any:
    """The JSON value of an encoded partition value (the inverse of :func:`encode_value`)."""
    if text == "%_null":
        return None
    if text == "%_true":
        return True
    if text == "%_false":
        return False
    if text.startswith(_TYPED):
        digits = text[2:]
        try:
            return int(digits, 10)
        except ValueError:
            raise PartitionValueError(f"{text!r} is not a Flow partition value (%_ then an integer)") from None
    try:
        return urllib.parse.unquote(text, errors="strict")
    except UnicodeDecodeError:
        raise PartitionValueError(f"{text!r} does not percent-decode to UTF-8") from None


def label_partitions(labels: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """``{field: decoded value}`` of a journal's ``estuary.dev/field/<f>`` labels."""
    return {name[len(FIELD_PREFIX) :]: decode_value(value) for name, value in labels if name.startswith(FIELD_PREFIX)}


def name_partitions(journal: str) -> dict[str, Any]:
    """``{field: decoded value}`` from a Flow journal name's ``<f>=<value>/`` segments (those
    between the template name and ``pivot=``). Flow builds the name from the labels' values, so
    this equals :func:`label_partitions` of its labels; executors use it, knowing only the name."""
    out: dict[str, Any] = {}
    for segment in journal.split("/"):
        field, eq, value = segment.partition("=")
        if eq and field != PIVOT:
            out[field] = decode_value(value)
    return out


def truncated_at(journal: str, labels: Iterable[tuple[str, str]]) -> int:
    """The clock of a journal's ``estuary.dev/truncated-at`` label, 0 without one. A value other
    than 16 lowercase hex digits raises :class:`~pyspark_gazette.errors.OptionError` naming the
    journal, the label and the value."""
    value = next((v for name, v in labels if name == TRUNCATED_AT), None)
    if value is None:
        return 0
    if len(value) != 16 or value.strip("0123456789abcdef"):
        raise OptionError(
            "collection",
            f"journal {journal!r} has label {TRUNCATED_AT}={value!r}, which is not a Flow truncation clock "
            "(16 lowercase hex digits of a message-UUID clock)",
        )
    return int(value, 16)


def journal_prefix(collection: str, prefix: str | None = None) -> str:
    """The ``name:prefix`` Flow selects a collection's journals with: the partition template's
    name and ``/`` (``prefix`` when known, e.g. from an authorization), else the collection name
    and ``/`` (which every generation of the collection's journals begins with)."""
    p = prefix or collection
    return p if p.endswith("/") else p + "/"


def parse_partition_selector(text: str) -> dict[str, dict[str, list[Any]]]:
    """``{"include": {field: [values]}, "exclude": {...}}``: a Flow partition selector, as
    flowctl's ``--partitions`` takes it."""
    key = "collection.partitions"
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise OptionError(key, f'is not JSON ({e.msg}); expected e.g. {{"include": {{"region": ["eu"]}}}}') from None
    if not isinstance(doc, dict) or not set(doc) <= {"include", "exclude"}:
        raise OptionError(key, 'expected a JSON object with "include" and/or "exclude" maps of field to values')
    out: dict[str, dict[str, list[Any]]] = {}
    for side in ("include", "exclude"):
        fields = doc.get(side) or {}
        if not isinstance(fields, dict):
            raise OptionError(key, f'"{side}" must map partition fields to lists of values')
        for field, values in fields.items():
            if not isinstance(values, list) or not values:
                raise OptionError(key, f'"{side}" field {field!r} must have a non-empty list of values')
            for v in values:
                try:
                    encode_value(v)
                except PartitionValueError as e:
                    raise OptionError(key, f'"{side}" field {field!r}: {e}') from None
        out[side] = {str(f): list(v) for f, v in fields.items()}
    return out


def _term(field: str, values: list[Any], exclude: bool) -> str:
    name = FIELD_PREFIX + field
    encoded = ", ".join(encode_value(v) for v in values)
    return f"{name} {'notin' if exclude else 'in'} ({encoded})"


def collection_selector(
    collection: str, prefix: str | None = None, partitions: Mapping[str, Mapping[str, list[Any]]] | None = None
) -> str:
    """The selector (Gazette's text syntax) of a collection's journals as Flow builds it:
    ``estuary.dev/collection=<name>``, ``name:prefix=<template name>/``, and a partition selector's
    ``estuary.dev/field/<f> in (...)`` / ``notin (...)`` terms."""
    terms = [f"{COLLECTION}={collection}", f"name:prefix={journal_prefix(collection, prefix)}"]
    for side in ("include", "exclude"):
        for field, values in ((partitions or {}).get(side) or {}).items():
            terms.append(_term(field, list(values), side == "exclude"))
    return ",".join(terms)


__all__ = [
    "COLLECTION",
    "FIELD_PREFIX",
    "KEY_BEGIN",
    "KEY_END",
    "PIVOT",
    "TRUNCATED_AT",
    "PartitionValueError",
    "collection_selector",
    "decode_value",
    "encode_value",
    "journal_prefix",
    "label_partitions",
    "name_partitions",
    "parse_partition_selector",
    "truncated_at",
]
