"""Spark's JSON value rules (``spark.read.schema(s).json(path)``), the reference of typed reads.

Every engine of :class:`~pyspark_gazette.spark.read.typed.TypedDecoder` follows these rules; the
per-record converters here (:func:`converter`) *are* them, and the faster engines (pyarrow's
reader, :mod:`.typed_arrow`; the C scanner, :mod:`.typed_native`) take only values they are
certain of by them and leave every other record to the converters.

Spark's rules, as followed here: integers must be JSON integers in range; doubles and floats take
any number plus the strings ``NaN``, ``Infinity``, ``-Infinity`` (a float is the number rounded
once to float32, past its range infinite; the JSON integer ``-0`` is ``0.0``, ``-0.0`` keeps its
sign; pyarrow's reader gives ``-0.0`` for both, so its zeros with a sign take the per-record rules);
strings take any value, a non-string as its JSON text; decimals take numbers or numeric strings,
rounded half-up to the scale, malformed past the precision; binary is base64; timestamps are
strings (the grammar below) or integer epoch seconds; a string without a zone is UTC; dates are
``yyyy[-m[-d]]`` strings with anything after ``T`` or a space ignored; ``TimestampNTZ`` refuses
a zone; an empty string is malformed for any non-string type. Content after the first JSON value
of a record is ignored; blank records produce no row; a top-level array of objects produces one
row per object (its metadata repeated); any other non-object is malformed; a duplicate key keeps
the last value; a record nested deeper than 1,000 levels anywhere, even in a field outside the
schema, is malformed (:mod:`pyspark_gazette.message.jsondoc`: pyarrow's reader takes any depth,
so records long enough and with enough brackets to be that deep take the per-record rules).
FAILFAST's error names the first field that does not convert, its type and its value
(:func:`why_malformed`).

Deviations from Spark (each checked against Spark 4 in tests/spark/test_typed_spark.py or by
hand):

* naive timestamps are read as UTC; Spark uses the session time zone, so results agree when
  ``spark.sql.session.timeZone`` is UTC;
* timestamp strings follow Spark's cast grammar (below) but zone region ids
  (``America/New_York``) and years outside 1-9999 are malformed here;
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

Timestamps and dates (the one statement of their grammar; every pattern below is built from its
parts). Spark's cast from string, ``[...]`` optional::

    [+-]yyyy[yy][-m[m][-d[d][(T|space)h[h][:m[m][:s[s][.fraction]]]]]][spaces][zone]
    zone: Z | UTC | GMT | +-h[h] | +-hh:mm | +-hhmm

with a zone only after the seconds, offsets up to 18:00, minutes up to 59, hours 0-23,
minutes and seconds 0-59, a real calendar date in years 1-9999, fraction digits past the sixth
dropped; ``TimestampNTZ`` takes no zone; a date is the same up to the day, then ``T`` or a space
and anything. Examples (``TimestampType``; UTC where no zone is given):

====================================  =========================================================
``2024-01-02T03:04:05Z``              accepted (the common form)
``2024-01-02 03:04:05.123456+01:00``  accepted (the common form): 02:04:05.123456 UTC
``2024-01-02T03:04:05-0130``          accepted (the common form): 04:34:05 UTC
``2024-01-02``                        accepted (the common form): midnight
``2024-1-2 3:4:5``                    accepted
``2024-01-02T03:04``                  accepted: 03:04:00 UTC
``2024-01-02T03:04:05 UTC``           accepted
``1700000000`` (a JSON integer)       accepted: epoch seconds (zoned timestamps only)
``2024-01-02T03:04Z``                 malformed: a zone needs seconds
``2024-01-02T03:04:05+18:30``         malformed: an offset past 18:00
``2024-02-30``                        malformed: no such date
``0000-01-01``                        malformed: years 1-9999 (a deviation from Spark, above)
``2024-01-02T24:00:00``               malformed: hour 24
====================================  =========================================================

The *common form* is ``yyyy-mm-dd`` or ``yyyy-mm-dd(T|space)hh:mm:ss[.fraction][zone]`` with a
zone ``Z``, ``+-hh:mm`` or ``+-hhmm`` and the ranges above (parts :data:`COMMON_DATE`,
:data:`COMMON_TIME`). The C scanner (``parse_ts`` in ``_native/scan.c``) takes exactly it; the
pyarrow path's vectorised conversion takes it with up to six fraction digits and ``Z`` or
``+-hh:mm`` zones (:data:`COMMON_FRACTION`, :data:`COMMON_ZONE`; :data:`TS_RE`, :data:`NTZ_RE`,
:data:`DATE_RE`); pyarrow's own ISO-8601 parser takes three forms more, which
:data:`PYARROW_ONLY_TS` finds. Everything else goes to the
per-record rules (:data:`_TS_PY`, :func:`_ts_conv`). tests/unit/test_spark_typed_timestamps.py
runs one table of accepted and rejected strings through all three engines.
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
from collections.abc import Callable, Iterable
from typing import Any

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
    StructType,
    TimestampNTZType,
    TimestampType,
)

from pyspark_gazette.errors import OptionError
from pyspark_gazette.message import jsondoc

# -- the timestamp grammar, part by part (see the module docstring) ---------------------------

#: Between the date and the time: ``T`` or one space.
SEP = "[T ]"
#: The common form's parts (fixed widths; ranges checked by the parse, or by the cast after it).
#: Years 0001-9999 (pyarrow's parse and cast would take year 0, which the per-record rules reject).
COMMON_YEAR = r"(?:000[1-9]|00[1-9]\d|0[1-9]\d\d|[1-9]\d{3})"
COMMON_DATE = COMMON_YEAR + r"-\d{2}-\d{2}"
COMMON_TIME = r"\d{2}:\d{2}:\d{2}"
#: Fraction digits pyarrow's cast takes (microseconds; the C scanner takes any number).
COMMON_FRACTION = r"(\.\d{1,6})?"
#: Zones of the vectorised conversion: offsets within 18:00 (``+-hhmm`` and zones after
#: a shorter time take the per-record rules).
COMMON_ZONE = r"Z|[+-](0\d|1[0-7]):[0-5]\d|[+-]18:00"

#: Strings the pyarrow path converts with one vectorised cast; anything else per record.
TS_RE = f"^{COMMON_DATE}{SEP}{COMMON_TIME}{COMMON_FRACTION}({COMMON_ZONE})?$"
TS_ZONED_RE = f"({COMMON_ZONE})$"
NTZ_RE = f"^{COMMON_DATE}{SEP}{COMMON_TIME}{COMMON_FRACTION}$"
DATE_RE = f"^{COMMON_DATE}$"

#: Zoned timestamps are parsed by pyarrow's ISO-8601 parser, which also takes three forms the
#: per-record rules reject: a zone after the hour or minutes (no seconds), offsets past 18:00, and
#: year 0. Records whose
#: text has anything like either (a false positive only costs the per-record rules), or an
#: escaped ASCII character that could spell one, go to the per-record rules.
PYARROW_ONLY_TS = (
    rf"\d{SEP}\d\d(:\d\d)?[Z+-]"  # a zone without seconds
    r'|:\d\d(\.\d*)?[+-](1[89]|[2-9]\d)(:?\d\d)?"'  # an offset of 18 hours or more
    r"|\\u00[2-5]"  # an escaped digit, sign, colon, letter...
    r'|"[+-]?0000-'  # year 0
)

# Spark's whole grammar (the per-record rules), each part optional after the one before.
_YEAR = r"(?P<y>[+-]?\d{4,6})"
_MONTH = r"-(?P<mo>\d{1,2})"
_DAY = r"-(?P<d>\d{1,2})"
_HOUR = SEP + r"(?P<h>\d{1,2})"
_MINUTE = r":(?P<mi>\d{1,2})"
_SECOND = r":(?P<s>\d{1,2})"
_FRACTION = r"\.(?P<f>\d*)"
_ZONE = r"(?P<z>Z|UTC|GMT|[+-]\d{1,2}(?::\d{1,2}|\d{2})?)"


def _each_optional(*parts: str) -> str:
    """``(?:a(?:b(?:c)?)?)?``: each part optional, and only after the one before it."""
    return "".join(f"(?:{p}" for p in parts) + ")?" * len(parts)


_TS_PY = re.compile(_YEAR + _each_optional(_MONTH, _DAY, _HOUR, _MINUTE, _SECOND, _FRACTION) + rf"\s*{_ZONE}?")
_DATE_PY = re.compile(_YEAR + _each_optional(_MONTH, _DAY, SEP + ".*"), re.S)
#: The largest offset of a zone, and of epoch seconds (Spark's bound: the microseconds fit a long).
_MAX_OFFSET = 18 * 3600
_MAX_EPOCH_SECONDS = 9223372036854

# -- other values ------------------------------------------------------------------------------

_DECIMAL_PY = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_SPECIAL_FLOATS = {"NaN": float("nan"), "Infinity": float("inf"), "+Infinity": float("inf"), "-Infinity": -float("inf")}
_FLOAT32_MAX = 3.4028234663852886e38
_F32 = struct.Struct("<f")
_EPOCH_DAY = _dt.date(1970, 1, 1).toordinal()
#: What JSON counts as white space around a record.
JSON_WS = " \t\r\n"
_EXCERPT = 120


class _Num(str):
    """A JSON non-integer number, kept as its source text (decimals, string fields)."""


DECODER = json.JSONDecoder(parse_float=_Num, parse_constant=_Num)


class Bad(Exception):
    """The value does not convert to the field's type."""


class Partial(Exception):
    """A struct (or array/map of them) converted only in part; ``value`` holds the part."""

    def __init__(self, value: Any):
        self.value = value


# -- per-record rules (Python) ---------------------------------------------------------------


def _int_conv(bits: int) -> Callable[[Any], Any]:
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def conv(v: Any) -> Any:
        if type(v) is int and lo <= v <= hi:
            return v
        raise Bad

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
        raise Bad

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
    raise Bad


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


def binary_conv(v: Any) -> Any:
    if type(v) is not str:
        raise Bad
    try:
        return base64.b64decode(v.encode("ascii"), validate=True)
    except (ValueError, binascii.Error):
        raise Bad from None


#: Room for any value of a Spark decimal (38 digits) and its rounding: the default context's 28
#: digits would refuse (or round) values Spark takes.
_DECIMAL_CTX = decimal.Context(prec=80, rounding=decimal.ROUND_HALF_UP)


def _decimal_conv(precision: int, scale: int) -> Callable[[Any], Any]:
    quantum, limit = decimal.Decimal(1).scaleb(-scale), decimal.Decimal(10) ** (precision - scale)

    def conv(v: Any) -> Any:
        if type(v) is bool or not isinstance(v, (int, str)) or (type(v) is str and not _DECIMAL_PY.fullmatch(v)):
            raise Bad
        try:
            d = decimal.Decimal(v)
            if not d.is_finite():
                raise Bad
            q = d.quantize(quantum, rounding=decimal.ROUND_HALF_UP, context=_DECIMAL_CTX)
        except decimal.InvalidOperation:
            raise Bad from None
        if q.copy_abs() >= limit:  # exact (abs() would round to the context)
            raise Bad
        return q

    return conv


def _days(y: str, mo: str | None, d: str | None) -> int:
    try:
        return _dt.date(int(y), int(mo or 1), int(d or 1)).toordinal() - _EPOCH_DAY
    except ValueError:
        raise Bad from None


def _date_conv(v: Any) -> Any:
    m = _DATE_PY.fullmatch(v.strip()) if type(v) is str else None
    if m is None:
        raise Bad
    return _days(m["y"], m["mo"], m["d"])


def _ts_conv(zoned: bool) -> Callable[[Any], Any]:
    def conv(v: Any) -> Any:
        if zoned and type(v) is int:
            if abs(v) > _MAX_EPOCH_SECONDS:
                raise Bad
            return v * 1_000_000
        m = _TS_PY.fullmatch(v.strip()) if type(v) is str else None
        if m is None or (m["z"] and (not zoned or m["s"] is None)):  # Spark: a zone needs seconds.
            raise Bad
        h, mi, s = int(m["h"] or 0), int(m["mi"] or 0), int(m["s"] or 0)
        if h > 23 or mi > 59 or s > 59:
            raise Bad
        micros = int((m["f"] or "")[:6].ljust(6, "0"))
        t = ((_days(m["y"], m["mo"], m["d"]) * 24 + h) * 60 + mi) * 60 + s
        z = m["z"]
        if z and z[0] in "+-":
            zh, _, zm = z[1:].partition(":")
            if not zm and len(zh) > 2:
                zh, zm = zh[:-2], zh[-2:]
            off = int(zh) * 3600 + int(zm or 0) * 60
            if off > _MAX_OFFSET or int(zm or 0) > 59:
                raise Bad
            t -= off if z[0] == "+" else -off
        return t * 1_000_000 + micros

    return conv


def _list_conv(elem: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def conv(v: Any) -> Any:
        if type(v) is not list:
            raise Bad
        out: list[Any] = []
        bad = False
        for x in v:
            if x is None:
                out.append(None)
                continue
            try:
                out.append(elem(x))
            except Partial as p:
                out.append(p.value)
                bad = True
        if bad:
            raise Partial(out)
        return out

    return conv


def _map_conv(value: Callable[[Any], Any]) -> Callable[[Any], Any]:
    def conv(v: Any) -> Any:
        if type(v) is not dict:
            raise Bad
        out: list[tuple[str, Any]] = []
        bad = False
        for k, x in v.items():
            if x is None:
                out.append((k, None))
                continue
            try:
                out.append((k, value(x)))
            except Partial as p:
                out.append((k, p.value))
                bad = True
        if bad:
            raise Partial(out)
        return out

    return conv


def struct_values(obj: dict, fields: list[tuple[str, Callable[[Any], Any]]]) -> tuple[dict, bool]:
    out: dict[str, Any] = {}
    bad = False
    for name, conv in fields:
        v = obj.get(name)
        if v is None:
            out[name] = None
            continue
        try:
            out[name] = conv(v)
        except Bad:
            out[name] = None
            bad = True
        except Partial as p:
            out[name] = p.value
            bad = True
    return out, bad


def _struct_conv(fields: list[tuple[str, Callable[[Any], Any]]]) -> Callable[[Any], Any]:
    def conv(v: Any) -> Any:
        if type(v) is not dict:
            raise Bad
        out, bad = struct_values(v, fields)
        if bad:
            raise Partial(out)
        return out

    return conv


def converter(t: DataType) -> Callable[[Any], Any]:
    if isinstance(t, StructType):
        return _struct_conv([(f.name, converter(f.dataType)) for f in t.fields])
    if isinstance(t, ArrayType):
        return _list_conv(converter(t.elementType))
    if isinstance(t, MapType):
        if not isinstance(t.keyType, StringType):
            raise OptionError("schema", f"JSON maps need string keys, not {t.keyType.simpleString()}")
        return _map_conv(converter(t.valueType))
    simple: dict[type, Callable[[Any], Any]] = {
        BooleanType: _bool_conv,
        ByteType: _int_conv(8),
        ShortType: _int_conv(16),
        IntegerType: _int_conv(32),
        LongType: _int_conv(64),
        FloatType: _float_conv(True),
        DoubleType: _float_conv(False),
        StringType: _string_conv,
        BinaryType: binary_conv,
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


def excerpt(text: str) -> str:
    return text if len(text) <= _EXCERPT else text[:_EXCERPT] + "..."


def why_malformed(raw: bytes | None, schema: StructType) -> str:
    """Why the per-record rules found a record malformed (FAILFAST's message): the first field
    whose value does not convert, with its type and value, or what is wrong with the record."""
    try:
        doc, _ = jsondoc.raw_decode(DECODER, (raw or b"").decode("utf-8").strip(JSON_WS))
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
        converter(t)(v)
        return None
    except (Bad, Partial):
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
    return f"field {path!r} expects {t.simpleString()}, not {excerpt(_dump(v))}"
