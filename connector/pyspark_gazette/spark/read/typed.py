"""Typed decoding of ndjson message payloads into Arrow columns, as Spark's JSON source would.

:class:`TypedDecoder` turns a ``BinaryArray`` of JSON documents into a ``RecordBatch`` of the
user's schema (exactly ``to_arrow_schema(schema, timezone="UTC")``, which Spark checks), with
the ``mode`` semantics of ``spark.read.schema(s).json(path)``:

* PERMISSIVE: a malformed record keeps the fields that did convert (Spark's partial results,
  nested structs included; an array or map with a bad element is null), the others are null,
  and the raw text goes to the corrupt column when the schema has it.
* DROPMALFORMED: malformed records are dropped. FAILFAST: the first one raises
  :class:`~pyspark_gazette.errors.MessageDecodeError` naming its index in the batch.

C scanner: where the optional extension ``pyspark_gazette._jsonscan`` is built (setup.py,
``_native/scan.c``) and every JSON field of the schema is a string, integer (long, int,
short, byte), double, float, boolean, timestamp, timestamp without zone or date, or a struct or
array of those (at any depth up to 8 levels; struct field names unique), the batch is first
scanned in C, straight from the array's buffers into Arrow buffers. It takes a record only when
certain of Spark's value by the rules below: an object whose values for the schema's fields
are strings (escapes, surrogate pairs, UTF-8 checked), JSON integers in range, numbers
(correctly rounded; Float once from the text, as pyarrow's reader), booleans, nulls;
timestamps as integer epoch seconds or ``yyyy-mm-dd[[T ]hh:mm:ss[.f*][Z|+-hh:mm|+-hhmm]]``
(zones only on zoned timestamps), dates as ``yyyy-mm-dd`` optionally followed by ``T`` or a
space and anything; structs as objects or null (fields matched by exact name, missing ones
null, an empty object a struct of nulls), arrays as arrays or null (null elements kept); other
fields skipped (any JSON, checked, never built). Every other record (another JSON type for a
field, a struct or array given as anything else, an element or struct field that does not
convert, a struct or array key given twice in one object, malformed JSON, an overflow, another
timestamp form, escapes in keys, a lone surrogate, ``NaN``, a top-level array, invalid UTF-8
anywhere in it, ...) goes, with its index, to the pure-Python path below as a sub-batch, so the
modes, partial results and the corrupt column stay the same. Schemas with any other type (maps,
decimals, binary, at any depth) take the pure-Python path for the whole batch; so do decoders
whose batches mostly fell back, after four batches. ``PYSPARK_GAZETTE_NATIVE_JSON=0`` (read by
each decoder) turns the scanner off.

Pure-Python path: the whole batch is parsed by ``pyarrow.json`` with an explicit schema of only
the schema's fields (fields outside it are skipped by the parser, never materialised). Zoned
timestamps (``TimestampType``) are parsed natively by pyarrow's ISO-8601 parser; the two forms
it takes that Spark rejects (a zone without seconds, an offset past 18:00) are found by one
vectorised regex over the records (:data:`_TS_REJECT`) and left to the per-record rules, and a
block with a form only Spark takes (``2024-1-2 3:4:5``) is parsed again with timestamps as
strings. Dates, ``TimestampNTZ`` and binary are read as strings and converted afterwards
(vectorised, for the common ISO-8601 forms). ``MapType`` fields, which pyarrow cannot parse, are
converted in Python from one parse of each record beside pyarrow's columns: a top-level map
whole; a map in a struct (at any depth of structs) along its path, pyarrow parsing the struct
without it and the struct rebuilt with the map in place (a record whose map does not convert
takes the per-record rules). Records with invalid UTF-8 (which pyarrow passes through inside
strings) take the per-record rules. Any record pyarrow rejects is found by re-parsing parts of
the failing range (the failing record itself when pyarrow names its row, sixteenths otherwise),
and records in small failing ranges (or with unusual values) are converted one by one in Python
following Spark's rules; so pyarrow only ever accepts records Spark accepts with the same
values.

Spark's rules, as followed here: integers must be JSON integers in range; doubles and floats take
any number plus the strings ``NaN``, ``Infinity``, ``-Infinity`` (a float is the number rounded
once to float32, past its range infinite; the JSON integer ``-0`` is ``0.0``, ``-0.0`` keeps its
sign; pyarrow's reader gives ``-0.0`` for both, so its zeros with a sign take the per-record rules);
strings take any value, a non-string as its JSON text; decimals take numbers or numeric strings,
rounded half-up to the scale, malformed past the precision; binary is base64; timestamps are
strings or integer epoch seconds; a string without a zone is UTC; dates are ``yyyy[-m[-d]]``
strings with anything after ``T`` or a space ignored; ``TimestampNTZ`` refuses a zone; an
empty string is malformed for any non-string type. Content after the first JSON value of a
record is ignored; blank records produce no row; a top-level array of objects produces one row
per object (its metadata repeated); any other non-object is malformed; a duplicate key keeps
the last value; a record nested deeper than 1,000 levels anywhere, even in a field outside the
schema, is malformed (:mod:`pyspark_gazette.message.jsondoc`: pyarrow's reader takes any depth,
so records long enough and with enough brackets to be that deep take the per-record rules).
FAILFAST's error names the first field that does not convert, its type and its value.

Deviations from Spark (each checked against Spark 4 in tests/spark/test_typed_spark.py or by
hand):

* naive timestamps are read as UTC; Spark uses the session time zone, so results agree when
  ``spark.sql.session.timeZone`` is UTC;
* timestamp strings follow Spark's cast grammar (``yyyy[-m[-d[Th[:m[:s[.f]]]]]]``, ``T`` or a
  space, a zone ``Z``, ``UTC``, ``GMT`` or ``+-h[h][:mm]`` only after the seconds) but zone
  region ids (``America/New_York``) and years outside 1-9999 are malformed here;
* single-quoted JSON, which Spark allows by default, is malformed here;
* an unpaired surrogate escape (``"\\ud83d"``) in a string value becomes ``?``, as Java's UTF-8
  encoder writes it (not checked against Spark);
* a StringType field given an object or array gets compact JSON text, where Spark keeps the
  source text with its spacing;
* a null message produces no row (a file has no null lines);
* a MapType inside an array (``array<map>``, ``array<struct<map>>``) sends every record
  through the per-record rules (pyarrow cannot parse maps): correct, but ~3.5x slower; maps
  at the top level or in structs cost one Python JSON parse of each record (docs/benchmarks.md,
  "Typed reads");
* a map keeps the last value of a duplicate key; Spark's map keeps every entry (``map_keys``
  shows the key twice; collected to Python, the last one wins there too).

Size (~1,000 lines, over the house's ~500): one small converter per Spark type, kept together
because they share the mode semantics above and the recursion over nested types.
"""

from __future__ import annotations

import base64
import binascii
import datetime as _dt
import decimal
import fractions
import json
import math
import re
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from pyspark_gazette.errors import MessageDecodeError, OptionError
from pyspark_gazette.message import jsondoc
from pyspark_gazette.native import NATIVE_ENV, extension  # noqa: F401  (NATIVE_ENV: named here too)
from pyspark_gazette.native import SCAN_KINDS as _SCAN_KINDS
from pyspark_gazette.native import module as _jsonscan  # None without the C scanner: the pure-Python path

MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")
RESERVED_KINDS = frozenset({"journal", "offset", "uuid", "producer", "clock", "flags", "mod_time", "timestamp"})
# A failing range is re-parsed in up to _FANOUT parts (fewer, larger re-parses than halving:
# a pyarrow call costs about as much as 50 records converted in Python); ranges of _LEAF
# records or fewer are converted record by record.
_LEAF = 64
_ERROR_ROW = re.compile(r" in row (\d+)$")
_FANOUT = 16
_EXCERPT = 120

# Zoned timestamps are parsed by pyarrow's ISO-8601 parser, which also takes two forms Spark
# rejects: a zone after the hour or minutes (no seconds), and offsets past 18:00. Records whose
# text has anything like either (a false positive only costs the per-record rules), or an escaped
# ASCII character that could spell one, go to the per-record rules; a block pyarrow cannot parse
# natively (a form only Spark takes, "2024-1-2 3:4:5") is parsed again with timestamps as strings.
_TS_REJECT = r'\d[T ]\d\d(:\d\d)?[Z+-]|:\d\d(\.\d*)?[+-](1[89]|[2-9]\d)(:?\d\d)?"|\\u00[2-5]'
# After this many blocks a decoder stops trying the native parse if most of them fell back.
_NATIVE_PATIENCE = 4

# Vectorised conversions accept only these forms; anything else goes to the per-record rules.
_TS_RE = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-](0\d|1[0-7]):[0-5]\d|[+-]18:00)?$"
_TS_ZONED_RE = r"(Z|[+-]\d{2}:\d{2})$"
_NTZ_RE = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?$"
_DATE_RE = r"^\d{4}-\d{2}-\d{2}$"

_TS_PY = re.compile(
    r"(?P<y>[+-]?\d{4,6})(?:-(?P<mo>\d{1,2})(?:-(?P<d>\d{1,2})(?:[T ](?P<h>\d{1,2})(?::(?P<mi>\d{1,2})"
    r"(?::(?P<s>\d{1,2})(?:\.(?P<f>\d*))?)?)?)?)?)?\s*(?P<z>Z|UTC|GMT|[+-]\d{1,2}(?::\d{1,2}|\d{2})?)?"
)
_DATE_PY = re.compile(r"(?P<y>[+-]?\d{4,6})(?:-(?P<mo>\d{1,2})(?:-(?P<d>\d{1,2})(?:[T ].*)?)?)?", re.S)
_DECIMAL_PY = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_SPECIAL_FLOATS = {"NaN": float("nan"), "Infinity": float("inf"), "+Infinity": float("inf"), "-Infinity": -float("inf")}
_FLOAT32_MAX = 3.4028234663852886e38
_F32 = struct.Struct("<f")
_EPOCH_DAY = _dt.date(1970, 1, 1).toordinal()
_JSON_WS = " \t\r\n"

# The scalar types the C scanner converts (its kinds: native.SCAN_KINDS), and structs and arrays
# of them (_SCAN_STRUCT, _SCAN_LIST); a schema with any other type among its JSON fields takes the
# pure-Python path for the whole batch.
_NATIVE_KINDS: dict[type, int] = {
    t: _SCAN_KINDS[name]
    for t, name in (
        (StringType, "string"),
        (LongType, "long"),
        (IntegerType, "int"),
        (ShortType, "short"),
        (ByteType, "byte"),
        (DoubleType, "double"),
        (FloatType, "float"),
        (BooleanType, "bool"),
        (TimestampType, "timestamp"),
        (TimestampNTZType, "ntz"),
        (DateType, "date"),
    )
}
_SCAN_STRUCT, _SCAN_LIST = _SCAN_KINDS["struct"], _SCAN_KINDS["list"]
# Nesting of structs and arrays the scanner is given (_native/scan.c takes up to 16).
_SCAN_DEPTH = 8


def _scan_item(name: str, t: DataType, depth: int = 0) -> tuple | None:
    """The C scanner's plan of a field (or an array's element), None if it cannot take it:
    another type, a struct without fields or with a name twice, nesting past _SCAN_DEPTH."""
    kind = _NATIVE_KINDS.get(type(t))
    if kind is not None:
        return (name.encode("utf-8"), kind)
    if depth >= _SCAN_DEPTH:
        return None
    if isinstance(t, StructType):
        names = t.fieldNames()
        kids = [_scan_item(f.name, f.dataType, depth + 1) for f in t.fields]
        if not kids or len(set(names)) != len(names) or None in kids:
            return None
        return (name.encode("utf-8"), _SCAN_STRUCT, kids)
    if isinstance(t, ArrayType):
        elem = _scan_item("", t.elementType, depth + 1)
        return None if elem is None else (name.encode("utf-8"), _SCAN_LIST, [elem])
    return None


def _scan_array(t: pa.DataType, col: tuple) -> pa.Array:
    """An Arrow array of type t from the scanner's buffers of one column (see _native/scan.c)."""
    length, valid, data, offsets, nulls, kids = col
    bufs = [pa.py_buffer(valid) if nulls else None]
    if offsets is not None:
        bufs.append(pa.py_buffer(offsets))
    if data is not None:
        bufs.append(pa.py_buffer(data))
    children = None
    if pa.types.is_struct(t):
        children = [_scan_array(t.field(i).type, k) for i, k in enumerate(kids)]
    elif pa.types.is_list(t):
        children = [_scan_array(t.value_type, kids[0])]
    return pa.Array.from_buffers(t, length, bufs, null_count=nulls, children=children)


def native_available() -> bool:
    """Whether the C scanner is built and not turned off by :data:`NATIVE_ENV`."""
    return extension() is not None


class _Num(str):
    """A JSON non-integer number, kept as its source text (decimals, string fields)."""


_DECODER = json.JSONDecoder(parse_float=_Num, parse_constant=_Num)


class _Bad(Exception):
    """The value does not convert to the field's type."""


class _Partial(Exception):
    """A struct (or array/map of them) converted only in part; ``value`` holds the part."""

    def __init__(self, value: Any):
        self.value = value


# -- per-record rules (Python) ---------------------------------------------------------------


def _int_conv(bits: int) -> Callable[[Any], Any]:
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def conv(v: Any) -> Any:
        if type(v) is int and lo <= v <= hi:
            return v
        raise _Bad

    return conv


def _float_conv(single: bool) -> Callable[[Any], Any]:
    def conv(v: Any) -> Any:
        if type(v) is int or type(v) is _Num:
            try:
                x = float(v)  # the JSON integer -0 is 0.0, as Spark's reader has it
            except OverflowError:  # an integer past the double range: infinite, as Java's
                x = math.inf if int(v) > 0 else -math.inf
            return _single(v, x) if single else x
        if type(v) is str and v in _SPECIAL_FLOATS:
            return _SPECIAL_FLOATS[v]
        raise _Bad

    return conv


def _single(v: int | str, x: float) -> float:
    """The float32 nearest the number ``v`` (``x`` its nearest double), rounded once from the
    exact value as Spark's reader and pyarrow's do (infinite past float32's range): the double
    rounds to the same float32 except where it lies exactly halfway between two of them."""
    if x != x or math.isinf(x):
        return x
    try:
        f = _F32.unpack(_F32.pack(x))[0]
    except OverflowError:  # past float32's range, or halfway to it: the tie is settled below
        f = math.copysign(math.inf, x)
    if f == x:
        return f
    half = math.ldexp(1.0, max(math.frexp(x)[1], -125) - 25)  # half a float32 step at x
    k = x / half
    if not k.is_integer() or int(k) % 2 == 0:
        return f  # not a midpoint: one rounding or two agree
    exact = fractions.Fraction(v)
    if exact == x:
        return f  # a true tie: to even, as the pack did
    y = x + half if exact > x else x - half
    return y if abs(y) <= _FLOAT32_MAX else math.copysign(math.inf, y)


def _bool_conv(v: Any) -> Any:
    if type(v) is bool:
        return v
    raise _Bad


def _string_conv(v: Any) -> Any:
    if isinstance(v, str):  # A string, or a number's source text.
        return _unpaired(str(v))
    if type(v) is bool:
        return "true" if v else "false"
    if type(v) is int:
        return str(v)
    return _unpaired(_dump(v))


_SURROGATE = re.compile("[\ud800-\udfff]")


def _unpaired(s: str) -> str:
    """``s`` with each unpaired surrogate (a lone ``\\ud83d`` escape) as ``?``, as Java's UTF-8
    encoder writes it into Spark's strings (UTF-8 cannot hold it)."""
    if _SURROGATE.search(s) is None:
        return s
    return s.encode("utf-8", "replace").decode("utf-8")


def _dump(v: Any) -> str:
    """Compact JSON text of a parsed value, numbers as written in the source."""
    if type(v) is dict:
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + _dump(x) for k, x in v.items()) + "}"
    if type(v) is list:
        return "[" + ",".join(_dump(x) for x in v) + "]"
    if type(v) is _Num:
        return str(v)
    return json.dumps(v, ensure_ascii=False)


def _binary_conv(v: Any) -> Any:
    if type(v) is not str:
        raise _Bad
    try:
        return base64.b64decode(v.encode("ascii"), validate=True)
    except (ValueError, binascii.Error):
        raise _Bad from None


def _decimal_conv(precision: int, scale: int) -> Callable[[Any], Any]:
    quantum, limit = decimal.Decimal(1).scaleb(-scale), decimal.Decimal(10) ** (precision - scale)

    def conv(v: Any) -> Any:
        if type(v) is bool or not isinstance(v, (int, str)) or (type(v) is str and not _DECIMAL_PY.fullmatch(v)):
            raise _Bad
        try:
            d = decimal.Decimal(v)
            if not d.is_finite():
                raise _Bad
            q = d.quantize(quantum, rounding=decimal.ROUND_HALF_UP)
        except decimal.InvalidOperation:
            raise _Bad from None
        if abs(q) >= limit:
            raise _Bad
        return q

    return conv


def _days(y: str, mo: str | None, d: str | None) -> int:
    try:
        return _dt.date(int(y), int(mo or 1), int(d or 1)).toordinal() - _EPOCH_DAY
    except ValueError:
        raise _Bad from None


def _date_conv(v: Any) -> Any:
    m = _DATE_PY.fullmatch(v.strip()) if type(v) is str else None
    if m is None:
        raise _Bad
    return _days(m["y"], m["mo"], m["d"])


def _ts_conv(zoned: bool) -> Callable[[Any], Any]:
    def conv(v: Any) -> Any:
        if zoned and type(v) is int:
            if abs(v) > 9223372036854:
                raise _Bad
            return v * 1_000_000
        m = _TS_PY.fullmatch(v.strip()) if type(v) is str else None
        if m is None or (m["z"] and (not zoned or m["s"] is None)):  # Spark: a zone needs seconds.
            raise _Bad
        h, mi, s = int(m["h"] or 0), int(m["mi"] or 0), int(m["s"] or 0)
        if h > 23 or mi > 59 or s > 59:
            raise _Bad
        micros = int((m["f"] or "")[:6].ljust(6, "0"))
        t = ((_days(m["y"], m["mo"], m["d"]) * 24 + h) * 60 + mi) * 60 + s
        z = m["z"]
        if z and z[0] in "+-":
            zh, _, zm = z[1:].partition(":")
            if not zm and len(zh) > 2:
                zh, zm = zh[:-2], zh[-2:]
            off = int(zh) * 3600 + int(zm or 0) * 60
            if off > 18 * 3600 or int(zm or 0) > 59:
                raise _Bad
            t -= off if z[0] == "+" else -off
        return t * 1_000_000 + micros

    return conv


def _list_conv(elem: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def conv(v: Any) -> Any:
        if type(v) is not list:
            raise _Bad
        out: list[Any] = []
        bad = False
        for x in v:
            if x is None:
                out.append(None)
                continue
            try:
                out.append(elem(x))
            except _Partial as p:
                out.append(p.value)
                bad = True
        if bad:
            raise _Partial(out)
        return out

    return conv


def _map_conv(value: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def conv(v: Any) -> Any:
        if type(v) is not dict:
            raise _Bad
        out: list[tuple[str, Any]] = []
        bad = False
        for k, x in v.items():
            if x is None:
                out.append((k, None))
                continue
            try:
                out.append((k, value(x)))
            except _Partial as p:
                out.append((k, p.value))
                bad = True
        if bad:
            raise _Partial(out)
        return out

    return conv


def _struct_values(obj: dict, fields: list[tuple[str, Callable[[Any], Any]]]) -> tuple[dict, bool]:
    out: dict[str, Any] = {}
    bad = False
    for name, conv in fields:
        v = obj.get(name)
        if v is None:
            out[name] = None
            continue
        try:
            out[name] = conv(v)
        except _Bad:
            out[name] = None
            bad = True
        except _Partial as p:
            out[name] = p.value
            bad = True
    return out, bad


def _struct_conv(fields: list[tuple[str, Callable[[Any], Any]]]) -> Callable[[Any], Any]:
    def conv(v: Any) -> Any:
        if type(v) is not dict:
            raise _Bad
        out, bad = _struct_values(v, fields)
        if bad:
            raise _Partial(out)
        return out

    return conv


def _converter(t: DataType) -> Callable[[Any], Any]:
    if isinstance(t, StructType):
        return _struct_conv([(f.name, _converter(f.dataType)) for f in t.fields])
    if isinstance(t, ArrayType):
        return _list_conv(_converter(t.elementType))
    if isinstance(t, MapType):
        if not isinstance(t.keyType, StringType):
            raise OptionError("schema", f"JSON maps need string keys, not {t.keyType.simpleString()}")
        return _map_conv(_converter(t.valueType))
    simple: dict[type, Callable[[Any], Any]] = {
        BooleanType: _bool_conv,
        ByteType: _int_conv(8),
        ShortType: _int_conv(16),
        IntegerType: _int_conv(32),
        LongType: _int_conv(64),
        FloatType: _float_conv(True),
        DoubleType: _float_conv(False),
        StringType: _string_conv,
        BinaryType: _binary_conv,
        DateType: _date_conv,
        TimestampType: _ts_conv(True),
        TimestampNTZType: _ts_conv(False),
    }
    if isinstance(t, DecimalType):
        return _decimal_conv(t.precision, t.scale)
    for cls, conv in simple.items():
        if type(t) is cls:
            return conv
    raise OptionError("schema", f"type {t.simpleString()} is not supported for JSON messages")


def _cut(text: str) -> str:
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "..."


def _why(raw: bytes | None, schema: StructType) -> str:
    """Why the per-record rules found a record malformed (FAILFAST's message): the first field
    whose value does not convert, with its type and value, or what is wrong with the record."""
    try:
        doc, _ = jsondoc.raw_decode(_DECODER, (raw or b"").decode("utf-8").strip(_JSON_WS))
    except UnicodeDecodeError:
        return "not UTF-8"
    except ValueError as e:
        return f"not JSON ({e})"
    with jsondoc.room():
        return _why_doc(doc, schema)


def _why_doc(doc: Any, schema: StructType) -> str:
    docs = doc if type(doc) is list and all(type(d) is dict for d in doc) else [doc]
    for d in docs:
        if type(d) is not dict:
            return f"a JSON {type(d).__name__.replace('_Num', 'number')}, not an object"
        for f in schema.fields:
            found = _first_bad(d.get(f.name), f.dataType, f.name)
            if found:
                return found
    return "a value that does not convert"


def _first_bad(v: Any, t: DataType, path: str) -> str | None:
    """Where in ``v`` (at ``path``) a value does not convert to its type, None if none."""
    if v is None:
        return None
    try:
        _converter(t)(v)
        return None
    except (_Bad, _Partial):
        pass
    inner: Iterable[tuple[str, Any, DataType]] = ()
    if isinstance(t, StructType) and type(v) is dict:
        inner = ((f"{path}.{f.name}", v.get(f.name), f.dataType) for f in t.fields)
    elif isinstance(t, ArrayType) and type(v) is list:
        inner = ((f"{path}[{i}]", x, t.elementType) for i, x in enumerate(v))
    elif isinstance(t, MapType) and type(v) is dict:
        inner = ((f"{path}[{k!r}]", x, t.valueType) for k, x in v.items())
    for p, x, xt in inner:
        found = _first_bad(x, xt, p)
        if found:
            return found
    return f"field {path!r} expects {t.simpleString()}, not {_cut(_dump(v))}"


# -- fast path (pyarrow) ---------------------------------------------------------------------


def _parse_type(t: DataType, out: pa.DataType, native: bool = False) -> pa.DataType:
    """The type pyarrow.json reads a field as: strings where we convert afterwards, except
    zoned timestamps with ``native`` (pyarrow parses ISO-8601 itself; see :data:`_TS_REJECT`)."""
    if native and type(t) is TimestampType:
        return out
    if isinstance(t, (TimestampType, TimestampNTZType, DateType, BinaryType)):
        return pa.string()
    if isinstance(t, StructType):
        return pa.struct(
            [pa.field(f.name, _parse_type(f.dataType, o.type, native)) for f, o in zip(t.fields, out, strict=True)]
        )
    if isinstance(t, ArrayType):
        return pa.list_(_parse_type(t.elementType, out.value_type, native))
    return out


def _has(t: DataType, kinds: tuple[type, ...]) -> bool:
    if isinstance(t, kinds):
        return True
    if isinstance(t, StructType):
        return any(_has(f.dataType, kinds) for f in t.fields)
    if isinstance(t, ArrayType):
        return _has(t.elementType, kinds)
    if isinstance(t, MapType):
        return _has(t.valueType, kinds)
    return False


def _has_ts(t: DataType) -> bool:
    """A zoned timestamp pyarrow parses natively (outside maps, which pyarrow never sees)."""
    if type(t) is TimestampType:
        return True
    if isinstance(t, StructType):
        return any(_has_ts(f.dataType) for f in t.fields)
    if isinstance(t, ArrayType):
        return _has_ts(t.elementType)
    return False


# A map plan: how to take a field's maps from a parsed record. ``(slot, conv, children)``: a map
# (``children`` None) converted whole by ``conv``, or a struct whose ``children`` (name, plan)
# hold maps; ``slot`` indexes the node's values (a map's, a struct's validity) in a batch.
_Plan = tuple[int, Callable[[Any], Any] | None, list[tuple[str, Any]] | None]


def _map_in_array(t: DataType) -> bool:
    """Whether a map sits inside an array (a map's own values are converted with it)."""
    if isinstance(t, StructType):
        return any(_map_in_array(f.dataType) for f in t.fields)
    if isinstance(t, ArrayType):
        return _has(t.elementType, (MapType,))
    return False


def _without_maps(f: StructField) -> StructField:
    """The field as pyarrow parses it: structs without their map fields, at any depth."""
    t = f.dataType
    if not isinstance(t, StructType) or not _has(t, (MapType,)):
        return f
    kept = [_without_maps(c) for c in t.fields if not isinstance(c.dataType, MapType)]
    return StructField(f.name, StructType(kept), f.nullable)


def _map_plan(t: DataType, conv: Callable[[Any], Any], slots: list[int]) -> _Plan:
    """The plan of a map or a struct holding maps; ``slots`` counts the slots taken so far."""
    slot = slots[0]
    slots[0] += 1
    if isinstance(t, MapType):
        return (slot, conv, None)
    assert isinstance(t, StructType)
    children = [
        (f.name, _map_plan(f.dataType, _converter(f.dataType), slots)) for f in t.fields if _has(f.dataType, (MapType,))
    ]
    return (slot, None, children)


def _plan_slots(plan: _Plan, n: int, vals: list[list[Any]]) -> None:
    """Empty slots: a map's values (null), a struct's validity (null until seen)."""
    slot, _, children = plan
    vals[slot] = [None] * n if children is None else [False] * n
    for _, child in children or ():
        _plan_slots(child, n, vals)


def _plan_fill(v: Any, plan: _Plan, i: int, vals: list[list[Any]]) -> bool:
    """Record ``i``'s non-null value ``v`` into the slots; False if it does not convert."""
    slot, conv, children = plan
    if children is None:
        try:
            vals[slot][i] = conv(v)  # type: ignore[misc]
        except (_Bad, _Partial):
            return False
        return True
    if type(v) is not dict:
        return False
    vals[slot][i] = True
    ok = True
    for name, child in children:
        c = v.get(name)
        if c is not None and not _plan_fill(c, child, i, vals):
            ok = False
    return ok


def _plan_build(plan: _Plan, out: pa.DataType, arr: pa.Array | None, vals: list[list[Any]]) -> pa.Array:
    """The column of ``out``: a map from its slot, a struct from pyarrow's ``arr`` (the struct
    without its maps) with the maps in place, in the schema's field order, validity as parsed."""
    slot, _, children = plan
    if children is None:
        return pa.array(vals[slot], out)
    assert arr is not None
    sub = dict(children)
    kids = []
    for f in out:
        if f.name in sub:
            inner = None if pa.types.is_map(f.type) else arr.field(f.name)
            kids.append(_plan_build(sub[f.name], f.type, inner, vals))
        else:
            kids.append(arr.field(f.name))
    valid = np.array(vals[slot], np.bool_)
    return pa.StructArray.from_arrays(kids, fields=list(out), mask=pa.array(~valid))


_CONVERTED = (TimestampType, TimestampNTZType, DateType, BinaryType, DecimalType)
# Zeros pyarrow reads as -0.0 go to the per-record rules (the text decides: -0 or -0.0).
_FLOATS = (FloatType, DoubleType)


def _post(arr: pa.Array, t: DataType, out: pa.DataType) -> tuple[pa.Array, np.ndarray | None]:
    """Convert a pyarrow-parsed column to ``out``; also return a mask of values left to the
    per-record rules (None when there are none)."""
    if arr.type == out and not _has(t, (DecimalType, BinaryType, *_FLOATS)):
        return arr, None  # natively parsed (zoned timestamps), or nothing to convert
    if not _has(t, _CONVERTED + _FLOATS):
        return arr.cast(out), None
    if isinstance(t, _FLOATS):  # pyarrow reads the JSON integer -0 as -0.0, Spark as 0.0
        x = arr.to_numpy(zero_copy_only=False)
        negative_zero = (x == 0) & np.signbit(x)
        return arr.cast(out), (negative_zero if negative_zero.any() else None)
    valid = pc.is_valid(arr)
    if isinstance(t, StructType):
        children, bad = [], None
        for i, f in enumerate(t.fields):
            child, b = _post(arr.field(i), f.dataType, out.field(i).type)
            children.append(child)
            bad = b if bad is None else (bad if b is None else bad | b)
        res = pa.StructArray.from_arrays(children, fields=list(out), mask=pc.invert(valid))
        return res, bad
    if isinstance(t, ArrayType):
        offsets = arr.offsets
        values, b = _post(arr.values, t.elementType, out.value_type)
        res = pa.ListArray.from_arrays(offsets, values, type=out, mask=pc.invert(valid))
        if b is None:
            return res, None
        parents = np.searchsorted(offsets.to_numpy(), np.flatnonzero(b), side="right") - 1
        bad = np.zeros(len(arr), np.bool_)
        bad[parents] = True
        return res, bad
    if isinstance(t, DecimalType):  # pyarrow does not check the precision.
        limit = pa.scalar(decimal.Decimal(10) ** (t.precision - t.scale), pa.decimal128(38, t.scale))
        over = pc.fill_null(pc.greater_equal(pc.abs(arr.cast(pa.decimal128(38, t.scale))), limit), False)
        bad = over.to_numpy(zero_copy_only=False)
        if not bad.any():
            return arr.cast(out), None
        return pc.if_else(over, pa.scalar(None, out), arr).cast(out), bad
    if isinstance(t, BinaryType):
        vals, bad = [], np.zeros(len(arr), np.bool_)
        for i, s in enumerate(arr.to_pylist()):
            try:
                vals.append(None if s is None else _binary_conv(s))
            except _Bad:
                vals.append(None)
                bad[i] = True
        return pa.array(vals, out), (bad if bad.any() else None)
    pattern = _DATE_RE if isinstance(t, DateType) else _NTZ_RE if isinstance(t, TimestampNTZType) else _TS_RE
    ok = pc.fill_null(pc.match_substring_regex(arr, pattern), True)
    if isinstance(t, TimestampType):
        zoned = pc.fill_null(pc.match_substring_regex(arr, _TS_ZONED_RE), True)
        arr = pc.if_else(zoned, arr, pc.binary_join_element_wise(arr, "Z", ""))
    good = pc.if_else(ok, arr, pa.scalar(None, pa.string()))
    try:
        res = good.cast(out)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):  # e.g. 2024-02-30: all per record.
        return pa.nulls(len(arr), out), valid.to_numpy(zero_copy_only=False)
    bad = pc.invert(ok).to_numpy(zero_copy_only=False)
    return res, (bad if bad.any() else None)


def _is_utf8(raw: bytes | None) -> bool:
    try:
        (raw or b"").decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def _join_lines(values: pa.Array) -> pa.Buffer:
    """The values as one ndjson buffer (each followed by a newline), without a Python loop."""
    joined = pc.binary_join_element_wise(values, pa.scalar(b"", values.type), pa.scalar(b"\n", values.type))
    offs = np.frombuffer(joined.buffers()[1], np.int64 if pa.types.is_large_binary(values.type) else np.int32)
    start, end = int(offs[joined.offset]), int(offs[joined.offset + len(joined)])
    return joined.buffers()[2][start:end]


class TypedDecoder:
    """JSON message payloads to typed Arrow batches; see the module docstring for semantics."""

    def __init__(
        self,
        schema: StructType,
        *,
        mode: str = "PERMISSIVE",
        corrupt_column: str = "_corrupt_record",
        reserved: Mapping[str, str] = {},  # noqa: B006 - read only
    ):
        self.mode = mode.upper()
        if self.mode not in MODES:
            raise OptionError("mode", f"must be one of {', '.join(MODES)}, not {mode!r}")
        for name, kind in reserved.items():
            if kind not in RESERVED_KINDS:
                raise OptionError("schema", f"column {name!r}: unknown metadata kind {kind!r}")
        self.schema = schema
        self.out_schema = to_arrow_schema(schema, timezone="UTC")
        self.reserved = dict(reserved)
        names = set(schema.fieldNames())
        self.corrupt_column = corrupt_column if corrupt_column in names else None
        if self.corrupt_column and not isinstance(schema[corrupt_column].dataType, StringType):
            raise OptionError("columnNameOfCorruptRecord", f"column {corrupt_column!r} must be a string column")
        fields = [f for f in schema.fields if f.name not in self.reserved and f.name != self.corrupt_column]
        self._json = StructType(fields)
        self._json_arrow = to_arrow_schema(self._json, timezone="UTC")
        self._fields = [(f.name, _converter(f.dataType)) for f in fields]
        # Maps are converted in Python from each record (pyarrow cannot parse maps), the rest by
        # pyarrow: a top-level map whole, a struct holding maps (through structs only) parsed
        # without them and rebuilt with them in place. A map inside an array sends every record
        # through the per-record rules.
        self._all_python = any(_map_in_array(f.dataType) for f in fields)
        slots = [0]
        self._maps = [
            (f.name, _map_plan(f.dataType, conv, slots))
            for f, (_, conv) in zip(fields, self._fields, strict=True)
            if _has(f.dataType, (MapType,)) and not self._all_python
        ]
        self._slots = slots[0]
        parsed = [_without_maps(f) for f in fields if not isinstance(f.dataType, MapType)]
        arrow_fields = list(zip(parsed, to_arrow_schema(StructType(parsed), timezone="UTC"), strict=True))
        self._parsed = {f.name: (f.dataType, o.type) for f, o in arrow_fields}

        def parse_options(native: bool) -> pj.ParseOptions:
            return pj.ParseOptions(
                explicit_schema=pa.schema(
                    [pa.field(f.name, _parse_type(f.dataType, o.type, native)) for f, o in arrow_fields]
                ),
                unexpected_field_behavior="ignore",  # fields outside the schema are skipped
            )

        self._parse = parse_options(False)
        self._parse_native = parse_options(True)
        self._native = any(_has_ts(f.dataType) for f, _ in arrow_fields)
        self._native_tries = self._native_fallbacks = 0
        self.errors = 0
        # The C scanner (_jsonscan): every JSON field a scalar it converts, or structs and arrays
        # of them; names unique at every level.
        items = [_scan_item(f.name, f.dataType) for f in fields]
        plan = [i for i in items if i is not None]
        self._scan_plan: list[tuple] | None = None
        if native_available() and plan and len(plan) == len(fields) and len(names) == len(schema.fields):
            self._scan_plan = plan
        self._scan_rows = self._scan_fallbacks = self._scan_batches = 0
        self._index_map: np.ndarray | None = None  # indices of a sub-batch in the batch decoded

    # -- per record --------------------------------------------------------------------------

    def _records(self, values: pa.Array, indices: Iterable[int], pieces: list) -> None:
        rows: list[dict | None] = []
        src: list[int] = []
        corrupt: list[bool] = []
        for i in indices:
            raw = values[i].as_py()
            for row, bad in self._record(raw):
                if bad:
                    self._malformed(i, raw)
                rows.append(row)
                src.append(i)
                corrupt.append(bad)
        if rows:
            cols = [
                pa.array([None if r is None else r[name] for r in rows], f.type)
                for (name, _), f in zip(self._fields, self._json_arrow, strict=True)
            ]
            batch = pa.RecordBatch.from_arrays(cols, schema=self._json_arrow)
            pieces.append((np.array(src, np.int64), batch, np.array(corrupt, np.bool_)))

    def _record(self, raw: bytes | None) -> list[tuple[dict | None, bool]]:
        if raw is None:
            return []
        try:
            text = raw.decode("utf-8").strip(_JSON_WS)
            if not text:
                return []
            doc, _ = jsondoc.raw_decode(_DECODER, text)  # Like Spark, ignores what follows the value.
        except ValueError:
            return [(None, True)]
        if jsondoc.maybe_deep(text, 100):  # converting recurses as deep as the record nests
            with jsondoc.room():
                return self._rows(doc)
        return self._rows(doc)

    def _rows(self, doc: Any) -> list[tuple[dict | None, bool]]:
        if type(doc) is dict:
            return [_struct_values(doc, self._fields)]
        if type(doc) is list and all(type(d) is dict for d in doc):
            return [_struct_values(d, self._fields) for d in doc]
        return [(None, True)]

    def _malformed(self, index: int, raw: bytes | None) -> None:
        self.errors += 1
        if self.mode == "FAILFAST":
            if self._index_map is not None:
                index = int(self._index_map[index])
            text = (raw or b"").decode("utf-8", "replace")
            why = _why(raw, self._json)
            err = MessageDecodeError(f"malformed JSON record at index {index} (mode FAILFAST): {why}: {_cut(text)!r}")
            err.index = index  # type: ignore[attr-defined]
            raise err

    # -- batches -----------------------------------------------------------------------------

    def _fast(
        self, values: pa.Array, lo: int, hi: int, pieces: list, exact: bool = False, native: bool | None = None
    ) -> None:
        """Parse records ``lo:hi`` with pyarrow, falling back as the module docstring says.

        The first attempt is multi-threaded. Once it fails, ranges are parsed as one block
        (``exact``), where pyarrow's "in row N" names the failing record exactly: the records
        before it are parsed again, it goes to the per-record rules, and parsing resumes after
        it. Errors without a row (a number that does not convert) re-parse sixteenths; in a
        native timestamp parse (``native``, see :data:`_TS_REJECT`) they re-parse the range with
        timestamps as strings first.
        """
        if native is None:
            native = self._native and not (
                self._native_tries >= _NATIVE_PATIENCE and 2 * self._native_fallbacks > self._native_tries
            )
            self._native_tries += native
        while lo < hi:
            part = values.slice(lo, hi - lo)
            try:
                buf = _join_lines(part)
                if exact:
                    read = pj.ReadOptions(use_threads=False, block_size=len(buf) + 1)
                else:
                    longest = int(pc.max(pc.binary_length(part)).as_py() or 0)
                    read = pj.ReadOptions(use_threads=True, block_size=max(1 << 20, longest + 2, len(buf) // 8 + 1))
                table = pj.read_json(pa.BufferReader(buf), read, self._parse_native if native else self._parse)
                if table.num_rows != hi - lo:
                    raise pa.ArrowInvalid("row count")
                break
            except pa.ArrowInvalid as e:
                row = _ERROR_ROW.search(str(e)) if exact or native else None
                if native and row is None and ("timestamp" in str(e) or "out of range" in str(e)):
                    self._native_fallbacks += 1
                    native = False  # a timestamp pyarrow does not take: this range as strings
                    continue
                r = int(row[1]) if row and exact else -1
                if hi - lo <= _LEAF or 0 <= r < _LEAF:
                    take = hi if hi - lo <= _LEAF else lo + max(r + 1, _LEAF)
                    self._records(values, range(lo, min(take, hi)), pieces)
                    lo = min(take, hi)
                elif 0 < r < hi - lo:
                    self._fast(values, lo, lo + r, pieces, True, native)
                    self._records(values, [lo + r], pieces)
                    lo += r + 1
                else:
                    parts = min(_FANOUT, -(-(hi - lo) // _LEAF))
                    edges = np.linspace(lo, hi, parts + 1).astype(np.int64).tolist()
                    for a, b in zip(edges[:-1], edges[1:], strict=True):
                        self._fast(values, a, b, pieces, True, native)
                    return
        else:
            return
        bad = None
        if native:
            flagged = pc.match_substring_regex(part, _TS_REJECT).to_numpy(zero_copy_only=False)
            bad = flagged if flagged.any() else None
        maps = self._map_columns(part, table) if self._maps else {}
        cols = []
        for f, o in zip(self._json.fields, self._json_arrow, strict=True):
            if f.name in maps:
                col, b = maps[f.name]
            else:
                col, b = _post(table.column(f.name).combine_chunks(), f.dataType, o.type)
            cols.append(col)
            bad = b if bad is None else (bad if b is None else bad | b)
        batch = pa.RecordBatch.from_arrays(cols, schema=self._json_arrow)
        if bad is None:
            pieces.append((np.arange(lo, hi, dtype=np.int64), batch, np.zeros(hi - lo, np.bool_)))
            return
        good = np.flatnonzero(~bad)
        pieces.append((good + lo, batch.take(pa.array(good)), np.zeros(len(good), np.bool_)))
        self._records(values, (np.flatnonzero(bad) + lo).tolist(), pieces)

    def _map_columns(self, part: pa.Array, table: pa.Table) -> dict[str, tuple[pa.Array, np.ndarray | None]]:
        """The columns holding maps of records pyarrow parsed: maps converted in Python from each
        record (one parse, values taken along each map's path), a struct holding maps rebuilt
        from pyarrow's column with the maps in place; a record whose map does not convert (or
        whose struct on a map's path is not an object) is left to the per-record rules."""
        n = len(part)
        bad = np.zeros(n, np.bool_)
        vals: list[list[Any]] = [[]] * self._slots
        for _, plan in self._maps:
            _plan_slots(plan, n, vals)
        for i, raw in enumerate(part.to_pylist()):
            try:
                doc, _ = jsondoc.raw_decode(_DECODER, raw.decode("utf-8").strip(_JSON_WS))
            except ValueError:
                bad[i] = True
                continue
            if type(doc) is not dict:
                bad[i] = True
                continue
            for name, plan in self._maps:
                v = doc.get(name)
                if v is not None and not _plan_fill(v, plan, i, vals):
                    bad[i] = True
        types = {f.name: f.type for f in self._json_arrow}
        out: dict[str, tuple[pa.Array, np.ndarray | None]] = {}
        for name, plan in self._maps:
            mask = bad
            arr = None
            if name in self._parsed:  # a struct holding maps: pyarrow parsed the rest of it
                t, o = self._parsed[name]
                arr, b = _post(table.column(name).combine_chunks(), t, o)
                if b is not None:
                    mask = bad | b
            out[name] = (_plan_build(plan, types[name], arr, vals), mask if mask.any() else None)
        return out

    def decode(self, values: pa.Array, metadata: Mapping[str, pa.Array]) -> pa.RecordBatch | None:
        """Decode one batch of JSON documents; ``metadata`` holds the reserved kinds' arrays."""
        n = len(values)
        if n == 0:
            return None
        if pa.types.is_large_binary(values.type) and pc.sum(pc.binary_length(values)).as_py() < 2**31 - 1:
            values = values.cast(pa.binary())
        pieces: list = []
        if self._use_scan():
            self._scan(values, pieces)
        else:
            self._python_pieces(values, pieces)
        return self._assemble(values, metadata, pieces)

    def _use_scan(self) -> bool:
        """The C scanner, unless most records of the last batches fell back from it."""
        if self._scan_plan is None:
            return False
        return self._scan_batches < _NATIVE_PATIENCE or 2 * self._scan_fallbacks <= self._scan_rows

    def _scan(self, values: pa.Array, pieces: list) -> None:
        """Records the C scanner is certain of become one piece; the others (status 2) are
        decoded by the pure-Python path as a sub-batch, their indices mapped back."""
        assert _jsonscan is not None and self._scan_plan is not None
        n = len(values)
        bufs = values.buffers()
        status, rows, cols = _jsonscan.scan(
            self._scan_plan,
            bufs[0] if values.null_count else None,
            bufs[1],
            bufs[2],
            values.offset,
            n,
            pa.types.is_large_binary(values.type),
        )
        st = np.frombuffer(status, np.uint8)
        if rows:
            arrays = [_scan_array(f.type, col) for f, col in zip(self._json_arrow, cols, strict=True)]
            batch = pa.RecordBatch.from_arrays(arrays, schema=self._json_arrow)
            pieces.append((np.flatnonzero(st == 0), batch, np.zeros(rows, np.bool_)))
        back = np.flatnonzero(st == 2)
        self._scan_batches += 1
        self._scan_rows += n
        self._scan_fallbacks += len(back)
        if len(back):
            sub: list = []
            self._index_map = back
            try:
                self._python_pieces(values.take(pa.array(back)), sub)
            finally:
                self._index_map = None
            pieces.extend((back[src], batch, corrupt) for src, batch, corrupt in sub)

    def _python_pieces(self, values: pa.Array, pieces: list) -> None:
        """The pure-Python path (pyarrow's reader and the per-record rules) over ``values``."""
        n = len(values)
        if self._all_python or not self._json.fields:
            self._records(values, range(n), pieces)
        else:
            # Records that do not start with "{" (blank, null, arrays, scalars, leading spaces)
            # go to the per-record rules, the runs between them to pyarrow. A newline inside a
            # record either breaks its parse or adds rows, which _fast notices.
            offsets = values.buffers()[1]
            starts = np.frombuffer(offsets, np.int64 if pa.types.is_large_binary(values.type) else np.int32)
            starts = starts[values.offset : values.offset + n + 1]
            buf = values.buffers()[2]
            data = np.frombuffer(buf, np.uint8) if buf is not None and buf.size else np.zeros(1, np.uint8)
            first = data[np.minimum(starts[:-1], len(data) - 1)]
            special = (starts[1:] == starts[:-1]) | (first != 0x7B)
            # pyarrow reads any depth; past Spark's limit a record is malformed (jsondoc).
            deep = np.flatnonzero((starts[1:] - starts[:-1] > 2 * jsondoc.MAX_DEPTH) & ~special)
            if len(deep):
                sub = values.take(pa.array(deep))
                brackets = pc.add(pc.count_substring(sub, "["), pc.count_substring(sub, "{"))
                special[deep[brackets.to_numpy(zero_copy_only=False) > jsondoc.MAX_DEPTH]] = True
            if values.null_count:
                special |= values.is_null().to_numpy(zero_copy_only=False)
            try:  # pyarrow's reader takes invalid UTF-8 inside strings; Python's rules do not
                values.cast(pa.string())
            except pa.ArrowInvalid:
                special |= np.array([not _is_utf8(v) for v in values.to_pylist()], np.bool_)
            edges = [0, *(np.flatnonzero(special[1:] != special[:-1]) + 1).tolist(), n]
            for lo, hi in zip(edges[:-1], edges[1:], strict=True):
                if special[lo]:
                    self._records(values, range(lo, hi), pieces)
                else:
                    self._fast(values, lo, hi, pieces)

    def _assemble(self, values: pa.Array, metadata: Mapping[str, pa.Array], pieces: list) -> pa.RecordBatch | None:
        if not pieces:
            return None
        src = np.concatenate([p[0] for p in pieces])
        corrupt = np.concatenate([p[2] for p in pieces])
        if len(pieces) == 1:
            batch = pieces[0][1]
        else:
            batch = pa.Table.from_batches([p[1] for p in pieces], schema=self._json_arrow).combine_chunks()
            batch = batch.to_batches()[0] if batch.num_rows else pa.RecordBatch.from_pylist([], self._json_arrow)
        order: np.ndarray | None = None
        if len(src) > 1 and bool(np.any(src[1:] < src[:-1])):
            order = np.argsort(src, kind="stable")
        if self.mode == "DROPMALFORMED" and corrupt.any():
            keep = np.flatnonzero(~corrupt)
            order = keep if order is None else order[~corrupt[order]]
        if order is not None:
            src, corrupt = src[order], corrupt[order]
            batch = batch.take(pa.array(order))
        if len(src) == 0:
            return None
        identity = len(src) == len(values) and bool(np.all(src == np.arange(len(src))))
        take = None if identity else pa.array(src)
        cols = []
        for f in self.out_schema:
            if f.name in self.reserved:
                kind = self.reserved[f.name]
                if kind not in metadata:
                    raise KeyError(f"metadata for column {f.name!r} ({kind}) was not given")
                col = metadata[kind] if take is None else metadata[kind].take(take)
                cols.append(col.cast(f.type))
            elif f.name == self.corrupt_column:
                cols.append(self._corrupt_text(values, src, corrupt))
            else:
                cols.append(batch.column(f.name))
        return pa.RecordBatch.from_arrays(cols, schema=self.out_schema)

    @staticmethod
    def _corrupt_text(values: pa.Array, src: np.ndarray, corrupt: np.ndarray) -> pa.Array:
        if not corrupt.any():
            return pa.nulls(len(src), pa.string())
        raw = values.take(pa.array(src[corrupt]))
        try:
            text = raw.cast(pa.string())
        except pa.ArrowInvalid:  # Not UTF-8: replacement characters, as a Java decoder would.
            text = pa.array([None if b is None else b.decode("utf-8", "replace") for b in raw.to_pylist()], pa.string())
        idx = np.full(len(src), -1, np.int64)
        idx[corrupt] = np.arange(int(corrupt.sum()))
        return text.take(pa.array(idx, mask=~corrupt))
