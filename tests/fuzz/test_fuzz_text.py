"""Fuzzing the parsers of untrusted text: message UUIDs, label selectors, journal spec YAML,
durations, journal names, and typed JSON decoding. See conftest.py for the rules."""

from __future__ import annotations

import json
import pathlib
import uuid

import pyarrow as pa
import yaml
from fuzzing import EXAMPLES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pyspark_gazette.broker.specs import validate_journal_name
from pyspark_gazette.client.specs import load_specs, parse_duration
from pyspark_gazette.errors import GazetteError, MessageDecodeError
from pyspark_gazette.message.uuids import (
    build_uuid,
    extract_uuid_json,
    get_uuid_at,
    parse_uuid,
    set_uuid_at,
)
from pyspark_gazette.protocol import label_set, pb
from pyspark_gazette.protocol.labels import format_selector, matches, parse_selector
from pyspark_gazette.spark.read.typed import TypedDecoder
from typedjson import plain

FUZZ = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=6), kids, max_size=4),
    max_leaves=12,
)
POINTERS = st.sampled_from(["/_meta/uuid", "/uuid", "/a/b/c", "", "/", "/~0/~1", "/_meta/uuid/x"]) | st.text(
    max_size=12
)


@FUZZ
@given(
    st.one_of(st.text(max_size=40), st.binary(max_size=20), st.uuids().map(str), st.binary(min_size=16, max_size=16))
)
def test_uuid_parsing(fuzz, value):
    parts = fuzz.run("uuids.parse_uuid", lambda: parse_uuid(value))
    if isinstance(parts, tuple):
        producer, clock, flags = parts
        assert parse_uuid(build_uuid(producer, clock, flags)) == parts


@FUZZ
@given(
    doc=JSON,
    pointer=POINTERS,
    u=st.none() | st.uuids(version=1) | st.text(max_size=40),
    junk=st.binary(max_size=8),
    where=st.integers(0, 200),
)
def test_uuid_extraction_from_documents(fuzz, doc, pointer, u, junk, where):
    """The fast raw-bytes extraction agrees with decoding the document, or both refuse it."""
    if isinstance(doc, dict) and u is not None:
        try:
            set_uuid_at(doc, u if isinstance(u, uuid.UUID) else u, pointer)  # type: ignore[arg-type]
        except Exception:
            pass
    raw = json.dumps(doc).encode()
    damaged = raw[:where] + junk + raw[where:] if junk else raw
    fast = fuzz.run("uuids.extract_uuid_json", lambda: extract_uuid_json(damaged, pointer))
    if damaged == raw and not isinstance(fast, Exception):
        slow = fuzz.run("uuids.get_uuid_at", lambda: get_uuid_at(json.loads(raw), pointer))
        assert fast == slow


SELECTOR_TEXT = st.text(alphabet="abc.-_/=!,() :inotprefx%\t\"'*\\é", max_size=40) | st.text(max_size=40)


@FUZZ
@given(SELECTOR_TEXT)
def test_label_selectors(fuzz, text):
    sel = fuzz.run("labels.parse_selector", lambda: parse_selector(text))
    if isinstance(sel, pb.LabelSelector):
        assert parse_selector(format_selector(sel)) == sel


@FUZZ
@given(
    text=SELECTOR_TEXT,
    labels=st.dictionaries(st.sampled_from(["a", "b", "name", "prefix"]), st.text("abc/", max_size=6), max_size=3),
)
def test_label_selector_matching(fuzz, text, labels):
    sel = fuzz.run("labels.parse_selector", lambda: parse_selector(text))
    if isinstance(sel, pb.LabelSelector):
        ls = fuzz.run("labels.label_set", lambda: label_set(labels))
        if isinstance(ls, pb.LabelSet):
            assert matches(sel, ls, journal_name="a/b") in (True, False)


SPEC_KEYS = st.sampled_from(
    ["name", "replication", "labels", "fragment", "flags", "children", "revision", "delete", "suspend", "bogus"]
)
FRAGMENT = st.dictionaries(
    st.sampled_from(
        ["length", "compression_codec", "stores", "refresh_interval", "retention", "path_postfix_template"]
    ),
    JSON | st.sampled_from(["ZSTANDARD", "GZIP", "1m30s", "-5s", "file:///x/", "s3://b/p/?region=x"]),
    max_size=4,
)
NODE = st.recursive(
    st.dictionaries(SPEC_KEYS, JSON | FRAGMENT | st.sampled_from(["a/", "a/b", "a//b", "../x", "O_RDWR"]), max_size=5),
    lambda kids: st.fixed_dictionaries(
        {"name": st.sampled_from(["a/", "a/b", "b/"]), "children": st.lists(kids, max_size=3)}
    ),
    max_leaves=6,
)


QUICKSTART_YAML = (pathlib.Path(__file__).resolve().parents[2] / "conf/journals/quickstart.yaml").read_text()
EDITED_YAML = st.tuples(
    st.integers(0, len(QUICKSTART_YAML)), st.integers(0, 12), st.text("ab:-/ {}[]\n0123456789'\"#!&*", max_size=6)
).map(lambda t: QUICKSTART_YAML[: t[0]] + t[2] + QUICKSTART_YAML[t[0] + t[1] :])


@FUZZ
@given(st.one_of(NODE.map(lambda n: yaml.safe_dump(n)), st.text(max_size=200), EDITED_YAML))
def test_journal_spec_yaml(fuzz, text):
    nodes = fuzz.run("specs.load_specs", lambda: load_specs(text))
    if isinstance(nodes, list):
        for node in nodes:
            assert isinstance(node.spec, pb.JournalSpec) and node.spec.name


@FUZZ
@given(st.text(alphabet="0123456789.nsuµmh -+e", max_size=16) | st.text(max_size=16) | st.integers() | st.floats())
def test_durations(fuzz, text):
    out = fuzz.run("specs.parse_duration", lambda: parse_duration(text))
    if isinstance(out, float):
        assert abs(out) <= (2**63 - 1) / 1e9  # finite, and fits Go's int64 nanoseconds


@FUZZ
@given(st.text(alphabet="ab/.-_=%:;é\x00 ", max_size=40) | st.text(max_size=40))
def test_journal_names(fuzz, name):
    fuzz.run("broker.validate_journal_name", lambda: validate_journal_name(name))


TYPED = StructType(
    [
        StructField("i", IntegerType()),
        StructField("l", LongType()),
        StructField("d", DoubleType()),
        StructField("b", BooleanType()),
        StructField("s", StringType()),
        StructField("dec", DecimalType(10, 2)),
        StructField("dec38", DecimalType(38, 0)),  # the bound, 10^38, is past every decimal128
        StructField("frac", DecimalType(38, 36)),  # pyarrow wraps some numbers scaled up this far
        StructField("ts", TimestampType()),
        StructField("day", DateType()),
        StructField("arr", ArrayType(LongType())),
        StructField("m", MapType(StringType(), DoubleType())),
        StructField("st", StructType([StructField("x", LongType()), StructField("y", StringType())])),
        StructField("_corrupt_record", StringType()),
    ]
)
FIELD_VALUES = (
    JSON
    | st.sampled_from(
        ["2024-01-02T03:04:05Z", "2024-13-45", "NaN", "1e400", "12345678901.234", "", "  ", "2024", "+01:00"]
    )
    | st.sampled_from([12345, 10**38 - 1, -(10**38) + 1, 10**38, 0.5, 99999999.995, 1e-38, "9" * 38, 2995, 99])
    | st.integers(-(10**12), 10**12)
    | st.integers(-(10**40), 10**40)
)
RECORD = st.one_of(
    st.dictionaries(st.sampled_from(TYPED.fieldNames() + ["zz"]), FIELD_VALUES, max_size=6).map(
        lambda d: json.dumps(d).encode()
    ),
    st.binary(max_size=40),
    JSON.map(lambda v: json.dumps(v).encode()),
)


def seen(outcome):
    """What a decoding gave, compared exactly: the rows, or the record a decode error names."""
    if isinstance(outcome, MessageDecodeError):
        return ("raised", outcome.index)
    return None if outcome is None else plain(outcome)


@FUZZ
@given(
    records=st.lists(RECORD, min_size=1, max_size=12), mode=st.sampled_from(["PERMISSIVE", "DROPMALFORMED", "FAILFAST"])
)
def test_typed_json_decoding(fuzz, records, mode):
    """Both engines of this schema (pyarrow's reader with the per-record rules behind it, and
    the per-record rules alone) give the same batch, or in FAILFAST a decode error naming the
    same record: any other error of either, ours or not, fails the case."""
    dec, rules = TypedDecoder(TYPED, mode=mode), TypedDecoder(TYPED, mode=mode)
    rules._all_python = True
    values = pa.array([r.replace(b"\n", b" ") for r in records], pa.binary())
    batch = fuzz.run(f"typed.TypedDecoder[{mode}]", lambda: dec.decode(values, {}))
    alone = fuzz.run(f"typed.TypedDecoder[{mode}, per record]", lambda: rules.decode(values, {}))
    for got in (batch, alone):
        if isinstance(got, GazetteError):
            assert mode == "FAILFAST" and isinstance(got, MessageDecodeError), f"{type(got).__name__}: {got}"
    assert seen(batch) == seen(alone)  # the per-record rules are the reference of the engines
    assert dec.errors == rules.errors
    if isinstance(batch, pa.RecordBatch):
        assert batch.schema == dec.out_schema
        if mode == "DROPMALFORMED":
            assert batch.column("_corrupt_record").null_count == batch.num_rows


DECIMALS = StructType(
    [
        StructField("p10s2", DecimalType(10, 2)),
        StructField("p38s0", DecimalType(38, 0)),  # its bound, 10^38, is past every decimal128
        StructField("p38s2", DecimalType(38, 2)),
        StructField("p38s36", DecimalType(38, 36)),  # pyarrow's reader wraps 12345 scaled up this far
        # (no scale 38: it sends every record to the per-record rules, leaving nothing to compare)
        StructField("p20s19", DecimalType(20, 19)),
        StructField("_corrupt_record", StringType()),
    ]
)


@st.composite
def decimal_text(draw) -> str:
    """A JSON number (or numeric string) of 1-45 digits around the point, at times an exponent."""
    digits = st.text(alphabet="0123456789", min_size=1, max_size=45)
    text = draw(st.sampled_from(["", "-"])) + draw(digits)
    if draw(st.booleans()):
        text += "." + draw(digits)
    if draw(st.integers(0, 4)) == 0:
        text += "e" + str(draw(st.integers(-45, 45)))
    if len(text.lstrip("-")) > 1 and text.lstrip("-")[0] == "0" and text.lstrip("-")[1] != ".":
        text = text.replace("0", "1", 1)  # no leading zeros (not JSON)
    return json.dumps(text) if draw(st.integers(0, 5)) == 0 else text


DECIMAL_RECORD = st.dictionaries(
    st.sampled_from(DECIMALS.fieldNames()[:-1]), decimal_text(), min_size=1, max_size=3
).map(lambda d: ("{" + ",".join(f'"{k}":{v}' for k, v in d.items()) + "}").encode())


@FUZZ
@given(records=st.lists(DECIMAL_RECORD, min_size=1, max_size=12), mode=st.sampled_from(["PERMISSIVE", "FAILFAST"]))
def test_typed_decimals_on_both_engines(fuzz, records, mode):
    """Decimals at every edge of their type: pyarrow's reader (with the per-record rules behind
    it) gives what the per-record rules give alone, and neither raises anything but a decode
    error (FAILFAST)."""
    dec, rules = TypedDecoder(DECIMALS, mode=mode), TypedDecoder(DECIMALS, mode=mode)
    assert not dec._all_python
    rules._all_python = True
    values = pa.array(records, pa.binary())
    batch = fuzz.run(f"typed.decimals[{mode}]", lambda: dec.decode(values, {}))
    alone = fuzz.run(f"typed.decimals[{mode}, per record]", lambda: rules.decode(values, {}))
    for got in (batch, alone):
        if isinstance(got, GazetteError):
            assert mode == "FAILFAST" and isinstance(got, MessageDecodeError), f"{type(got).__name__}: {got}"
    assert seen(batch) == seen(alone)
    assert dec.errors == rules.errors
