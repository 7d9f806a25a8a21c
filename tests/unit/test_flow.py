"""Estuary Flow collections: label encoding, the collection selector, options and the builder."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest
from pyspark.sql.types import BooleanType, LongType, StringType, StructField, StructType, TimestampType

from pyspark_gazette.errors import OptionError
from pyspark_gazette.flow.documents import CONTROL, is_ack, is_control
from pyspark_gazette.flow.labels import (
    TRUNCATED_AT,
    PartitionValueError,
    collection_selector,
    decode_value,
    encode_value,
    label_partitions,
    name_partitions,
    truncated_at,
)
from pyspark_gazette.message import NDJSON, build_uuid
from pyspark_gazette.message.uuids import Flags, clock_from_unix, clock_to_micros
from pyspark_gazette.protocol import label_set
from pyspark_gazette.protocol.labels import matches, parse_selector
from pyspark_gazette.spark.options import ReadOptions
from pyspark_gazette.spark.read.flow import FlowOutputBuilder, PartitionPredicate, collection_schema, output_builder
from pyspark_gazette.spark.read.segments import Messages

ADDR = {"broker.address": "http://127.0.0.1:1"}


@pytest.mark.parametrize(
    "value, encoded",
    [
        (None, "%_null"),
        (True, "%_true"),
        (False, "%_false"),
        (0, "%_0"),
        (-8675309, "%_-8675309"),
        (2**64 - 1, "%_18446744073709551615"),
        ("eu", "eu"),
        ("null", "null"),  # a string that looks like another type stays a string
        ("%_true", "%25_true"),
        ("-12", "-12"),
        ("a b,c!", "a%20b%2Cc%21"),
        ("x/y+z=1", "x%2Fy%2Bz%3D1"),
        ("tilde~dot.dash-under_", "tilde%7Edot.dash-under_"),
        ("héllo 👋", "h%C3%A9llo%20%F0%9F%91%8B"),
    ],
)
def test_partition_values_encode_and_decode_as_flow_does(value, encoded):
    assert encode_value(value) == encoded
    assert decode_value(encoded) == value
    # Every encoding is a valid Gazette label value.
    label_set({"estuary.dev/field/f": encoded})


@pytest.mark.parametrize("bad", ["%_", "%_12a", "%_1.5", "%FF"])
def test_malformed_partition_values_are_refused(bad):
    with pytest.raises(PartitionValueError):
        decode_value(bad)


@pytest.mark.parametrize("bad", [1.5, [1], {"a": 1}])
def test_only_scalars_are_partition_values(bad):
    with pytest.raises(PartitionValueError):
        encode_value(bad)


def test_partitions_from_labels_equal_those_from_the_journal_name():
    labels = [
        ("estuary.dev/collection", "acme/orders"),
        ("estuary.dev/field/region", "us%20west"),
        ("estuary.dev/field/vip", "%_true"),
        ("estuary.dev/field/year", "%_2026"),
        ("estuary.dev/key-begin", "80000000"),
    ]
    name = "acme/orders/0a1b2c3d4e5f6071/region=us%20west/vip=%_true/year=%_2026/pivot=80000000"
    assert label_partitions(labels) == name_partitions(name) == {"region": "us west", "vip": True, "year": 2026}


def _spec_labels(collection, name, **fields):
    labels = {"estuary.dev/collection": collection}
    labels.update({f"estuary.dev/field/{k}": encode_value(v) for k, v in fields.items()})
    return label_set(labels), name


def test_collection_selector_selects_as_flow_does():
    sel = parse_selector(
        collection_selector("acme/orders", None, {"include": {"region": ["eu", "us"]}, "exclude": {"vip": [True]}})
    )
    cases = [
        (_spec_labels("acme/orders", "acme/orders/g1/region=eu/vip=%_false/pivot=00", region="eu", vip=False), True),
        (_spec_labels("acme/orders", "acme/orders/g1/region=us/vip=%_false/pivot=00", region="us", vip=False), True),
        (_spec_labels("acme/orders", "acme/orders/g1/region=eu/vip=%_true/pivot=00", region="eu", vip=True), False),
        (_spec_labels("acme/orders", "acme/orders/g1/region=ap/vip=%_false/pivot=00", region="ap", vip=False), False),
        # Another collection's journals, even under the same name prefix.
        (
            _spec_labels("acme/orders-v2", "acme/orders/g1/region=eu/vip=%_false/pivot=00", region="eu", vip=False),
            False,
        ),
        # The collection label on a journal outside the collection's name prefix.
        (_spec_labels("acme/orders", "other/orders/region=eu/vip=%_false/pivot=00", region="eu", vip=False), False),
    ]
    for (labels, name), want in cases:
        assert matches(sel, labels, journal_name=name) is want, name


def test_a_journal_prefix_narrows_to_one_generation_of_the_collection():
    sel = parse_selector(collection_selector("acme/orders", "acme/orders/gen2/"))
    labels, _ = _spec_labels("acme/orders", "")
    assert matches(sel, labels, journal_name="acme/orders/gen2/pivot=00")
    assert not matches(sel, labels, journal_name="acme/orders/gen1/pivot=00")


def test_collection_option_selects_and_reads_committed_by_default():
    o = ReadOptions.parse({**ADDR, "collection": "acme/orders"}, env={})
    assert o.collection == "acme/orders" and o.read_committed and not o.control_documents
    assert o.selector == "estuary.dev/collection=acme/orders,name:prefix=acme/orders/"
    assert o.uuid_pointer == "/_meta/uuid"
    o = ReadOptions.parse({**ADDR, "collection": "acme/orders", "readCommitted": "false"}, env={})
    assert not o.read_committed
    o = ReadOptions.parse({**ADDR, "collection": "acme/orders", "collection.controlDocuments": "true"}, env={})
    assert o.control_documents
    o = ReadOptions.parse(
        {**ADDR, "collection": "acme/orders", "collection.partitions": '{"include": {"region": ["eu"]}}'},
        streaming=True,
        env={},
    )
    assert "estuary.dev/field/region in (eu)" in (o.selector or "")


@pytest.mark.parametrize(
    "options, key, text",
    [
        ({"collection": "acme/orders", "journals": "a/b"}, "collection", "not both"),
        ({"collection": "acme/orders", "selector": "x=y"}, "collection", "not both"),
        ({"collection": "acme/orders/"}, "collection", "not a Flow collection name"),
        ({"collection.partitions": '{"include": {}}', "journals": "a/b"}, "collection.partitions", "only with"),
        ({"collection": "a/b", "collection.partitions": "{"}, "collection.partitions", "is not JSON"),
        ({"collection": "a/b", "collection.partitions": '{"only": {}}'}, "collection.partitions", "include"),
        (
            {"collection": "a/b", "collection.partitions": '{"include": {"f": []}}'},
            "collection.partitions",
            "non-empty",
        ),
        ({"collection": "a/b", "collection.partitions": '{"include": {"f": [1.5]}}'}, "collection.partitions", "1.5"),
    ],
)
def test_collection_option_errors_name_the_option(options, key, text):
    with pytest.raises(OptionError) as e:
        ReadOptions.parse({**ADDR, **options}, env={})
    assert e.value.option == key and text in str(e.value)


def test_flags():
    assert is_ack(Flags.ACK_TXN) and not is_ack(Flags.CONTINUE_TXN) and not is_ack(CONTROL)
    assert is_control(CONTROL) and not is_control(Flags.ACK_TXN) and not is_control(Flags.OUTSIDE_TXN)


def test_clock_to_micros():
    clock = clock_from_unix(1_764_000_000, 123_456_700)
    assert clock_to_micros(clock) == 1_764_000_000_123_456
    assert clock_to_micros(clock | 0xF) == 1_764_000_000_123_456  # the counter is not time


PRODUCER = bytes([0x01, 2, 3, 4, 5, 6])
T0 = 1_764_000_000


def _doc(seq: int, flags: int, **body) -> bytes:
    u = build_uuid(PRODUCER, clock_from_unix(T0 + seq), flags)
    meta = {"uuid": str(u), **body.pop("_meta", {})}
    return json.dumps({"_meta": meta, **body}).encode()


def _msgs(docs: list[bytes]) -> Messages:
    offsets, o = [], 0
    for d in docs:
        offsets.append(o)
        o += len(d) + 1
    return Messages(pa.array(offsets, pa.int64()), pa.array(docs, pa.binary()), T0)


JOURNAL = "acme/orders/g1/region=eu/year=%_2026/pivot=00"
DOCS = [
    _doc(1, Flags.OUTSIDE_TXN, id=1, _meta={"op": "c"}),
    _doc(2, CONTROL, _meta={"backfillBegin": True}),
    _doc(3, Flags.OUTSIDE_TXN, id=2, _meta={"op": "u"}),
    _doc(4, Flags.ACK_TXN, _meta={"ack": True}),
    _doc(5, Flags.OUTSIDE_TXN, id=3, _meta={"op": "d"}),
]


def test_default_schema_of_a_collection():
    labels = [
        [("estuary.dev/field/region", "eu"), ("estuary.dev/field/year", "%_2026"), ("estuary.dev/field/vip", "%_true")],
        [
            ("estuary.dev/field/region", "%_7"),
            ("estuary.dev/field/year", "%_null"),
            ("estuary.dev/field/vip", "%_false"),
        ],
    ]
    schema = collection_schema(labels)
    assert [(f.name, type(f.dataType)) for f in schema.fields] == [
        ("journal", StringType),
        ("offset", LongType),
        ("value", StringType),
        ("region", StringType),  # a string and an integer: STRING
        ("vip", BooleanType),
        ("year", LongType),  # an integer and a null: LONG
        ("flow_published_at", TimestampType),
        ("_meta/op", StringType),
    ]


def test_builder_drops_acks_and_control_documents_and_fills_flow_columns():
    opts = ReadOptions.parse({**ADDR, "collection": "acme/orders"}, env={})
    schema = collection_schema([[("estuary.dev/field/region", "eu"), ("estuary.dev/field/year", "%_2026")]])
    builder = output_builder(schema, opts, NDJSON)
    assert isinstance(builder, FlowOutputBuilder)
    got = builder.build(JOURNAL, _msgs(DOCS)).to_pydict()
    assert [json.loads(v)["id"] for v in got["value"]] == [1, 2, 3]
    assert got["region"] == ["eu"] * 3 and got["year"] == [2026] * 3
    assert got["_meta/op"] == ["c", "u", "d"]
    assert [t.astimezone(dt.timezone.utc).timestamp() for t in got["flow_published_at"]] == [T0 + 1, T0 + 3, T0 + 5]
    assert got["journal"] == [JOURNAL] * 3


def test_control_documents_on_request():
    opts = ReadOptions.parse({**ADDR, "collection": "acme/orders", "collection.controlDocuments": "true"}, env={})
    schema = StructType([StructField("value", StringType()), StructField("flow_published_at", TimestampType())])
    got = output_builder(schema, opts, NDJSON).build(JOURNAL, _msgs(DOCS)).to_pydict()
    assert [json.loads(v)["_meta"].get("backfillBegin", False) for v in got["value"]] == [False, True, False, False]


def test_truncated_at_label_is_the_clock_in_fixed_width_hex():
    clock = clock_from_unix(T0 + 3)
    labels = [("estuary.dev/collection", "acme/orders"), (TRUNCATED_AT, f"{clock:016x}")]
    assert truncated_at(JOURNAL, labels) == clock
    assert truncated_at(JOURNAL, labels[:1]) == 0  # no label: nothing truncated


@pytest.mark.parametrize(
    "bad", ["", "not-a-clock", "1EC5F0F2A1B2C3D4", "1ec5f0f2a1b2c3d", "01ec5f0f2a1b2c3d4", " 1ec5f0f2a1b2c3d"]
)
def test_a_malformed_truncated_at_label_names_journal_label_and_value(bad):
    with pytest.raises(OptionError) as e:
        truncated_at(JOURNAL, [(TRUNCATED_AT, bad)])
    assert f"journal {JOURNAL!r} has label estuary.dev/truncated-at={bad!r}" in str(e.value)


def test_builder_drops_documents_published_before_the_truncation_clock():
    """The clock itself is kept (Flow keeps documents with clock >= the label); the ACK at T0+4
    is never a row; the control document at T0+2 is dropped by its clock, even on request."""
    schema = StructType([StructField("value", StringType()), StructField("flow_published_at", TimestampType())])
    for control in ("false", "true"):
        opts = ReadOptions.parse({**ADDR, "collection": "acme/orders", "collection.controlDocuments": control}, env={})
        got = output_builder(schema, opts, NDJSON, clock_from_unix(T0 + 3)).build(JOURNAL, _msgs(DOCS)).to_pydict()
        assert [json.loads(v)["id"] for v in got["value"]] == [2, 3]
    opts = ReadOptions.parse({**ADDR, "collection": "acme/orders"}, env={})
    assert output_builder(schema, opts, NDJSON, clock_from_unix(T0 + 6)).build(JOURNAL, _msgs(DOCS)) is None


def test_typed_schema_with_partition_columns_typed_by_the_user():
    opts = ReadOptions.parse({**ADDR, "collection": "acme/orders", "mode": "DROPMALFORMED"}, env={})
    schema = StructType(
        [
            StructField("id", LongType()),
            StructField("year", StringType()),  # the user wants the integer partition as text
            StructField("region", StringType()),
            StructField("_meta/op", StringType()),
        ]
    )
    docs = [DOCS[0], b"{not json", DOCS[2], DOCS[4]]
    got = output_builder(schema, opts, NDJSON).build(JOURNAL, _msgs(docs)).to_pydict()
    assert got == {"id": [1, 2, 3], "year": ["2026"] * 3, "region": ["eu"] * 3, "_meta/op": ["c", "u", "d"]}


def test_a_partition_value_that_does_not_fit_the_users_type_is_an_error():
    opts = ReadOptions.parse({**ADDR, "collection": "acme/orders"}, env={})
    schema = StructType([StructField("value", StringType()), StructField("region", LongType())])
    with pytest.raises(OptionError, match="region"):
        output_builder(schema, opts, NDJSON).build(JOURNAL, _msgs(DOCS))


def test_partition_predicates():
    values = {"region": "eu", "year": 2026, "vip": None}
    assert PartitionPredicate("region", "eq", ("eu",)).holds(values)
    assert not PartitionPredicate("region", "in", ("us", "ap")).holds(values)
    assert PartitionPredicate("year", "eq", (2026,)).holds(values)
    assert PartitionPredicate("year", "eq", ("2026",)).holds(values)  # as a STRING column shows it
    assert PartitionPredicate("vip", "null").holds(values) and not PartitionPredicate("vip", "notnull").holds(values)
    assert PartitionPredicate("other", "eq", ("x",)).holds(values)  # not a partition: Spark decides
