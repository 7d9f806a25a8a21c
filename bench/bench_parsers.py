#!/usr/bin/env python3
"""JSON parser candidates for typed reads, one process, on bench_read's own click events.

    .venv/bin/python bench/bench_parsers.py [--mib 64] [--rounds 3] [--profile] [--shape nested]

The bytes are bench_read's ndjson click events (``bench_read.make_lines``), or with ``--shape
nested`` its nested events (``make_nested_lines``: a struct, an array of strings, a field outside
the schema holding an object; schema ``bench_read.NESTED_SCHEMA``), split into message
pieces exactly as the executor does (:class:`~pyspark_gazette.message.ArrowLineDecoder` fed
``--piece`` MiB chunks, 1 MiB like ``segments.FEED_BYTES`` by default). Every contender turns
the same pieces into Arrow columns of the schema, best of ``--rounds``, interleaved:

* ``ours``: :class:`~pyspark_gazette.spark.read.typed.TypedDecoder` (every Spark rule) on its
  pure-Python path (pyarrow's reader), and ``ours, C scanner`` on the optional C scanner
  (``pyspark_gazette._jsonscan``), both in the same run;
* ``pyarrow.json``: the bare reader, timestamps as strings and natively (``timestamp[us, UTC]``);
* ``polars``, ``duckdb``, ``msgspec``/``orjson`` (+ ``pa.array``), ``simdjson`` where installed
  (each without Spark's rules: the least that parser costs);

for the full schema and for 2 of its fields, and ours again on larger pieces
(``--big`` MiB). With ``--profile`` a cProfile of ours (full schema) is printed.
Rates are MB of ndjson per CPU second of this process (``time.process_time``, all threads
counted): on a shared, loaded machine wall time measures the neighbours, CPU time the parser;
ratios are against ``ours`` in the same run. polars and duckdb run one thread. The nested shape
has ours, pyarrow.json and polars only (the others' Arrow columns would not be the schema's).
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("POLARS_MAX_THREADS", "1")  # one Spark task's worker: one core
import cProfile
import io
import pstats
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import pyarrow as pa  # noqa: E402
import pyarrow.json as pj  # noqa: E402

from bench_read import NESTED_SCHEMA, NESTED_TWO_FIELDS, SCHEMA, make_lines, make_nested_lines  # noqa: E402

TWO = "country STRING, amount DOUBLE"


def pieces(data: bytes, piece: int) -> list[pa.Array]:
    from pyspark_gazette.message import ArrowLineDecoder

    dec = ArrowLineDecoder(0)
    out = []
    for pos in range(0, len(data), piece):
        b = dec.feed(data[pos : pos + piece])
        if len(b):
            out.append(b.values)
    return out


def joined(v: pa.Array) -> pa.Buffer:
    from pyspark_gazette.spark.read.typed_arrow import join_lines

    return join_lines(v)


def _split(ddl: str) -> list[str]:
    """``ddl``'s top-level comma-separated parts (commas inside ``<...>`` kept)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(ddl):
        depth += (ch == "<") - (ch == ">")
        if ch == "," and depth == 0:
            parts.append(ddl[start:i].strip())
            start = i + 1
    return [*parts, ddl[start:].strip()]


def _spark_type(t: str):
    from pyspark.sql import types as T

    t = t.strip()
    if t.upper().startswith("ARRAY<"):
        return T.ArrayType(_spark_type(t[6:-1]))
    if t.upper().startswith("STRUCT<"):
        return T.StructType(
            [T.StructField(n.strip(), _spark_type(k)) for n, k in (f.split(":", 1) for f in _split(t[7:-1]))]
        )
    return {"LONG": T.LongType, "STRING": T.StringType, "DOUBLE": T.DoubleType, "TIMESTAMP": T.TimestampType}[t]()


def spark_schema(ddl: str):
    """A ``name TYPE, ...`` DDL (``STRUCT<a: T, ...>`` and ``ARRAY<T>`` of the scalars bench_read
    uses) as a StructType, without a Spark session."""
    from pyspark.sql import types as T

    return T.StructType([T.StructField(n, _spark_type(t)) for n, t in (c.split(None, 1) for c in _split(ddl))])


def contenders(ddl: str, nested: bool = False) -> dict:
    from pyspark.sql.pandas.types import to_arrow_schema

    from pyspark_gazette.spark.read.typed import TypedDecoder

    schema = spark_schema(ddl)
    out_schema = to_arrow_schema(schema, timezone="UTC")
    as_string = pa.schema([pa.field(f.name, pa.string()) if pa.types.is_timestamp(f.type) else f for f in out_schema])
    dec = TypedDecoder(schema)
    dec._scan_plan = None  # the pure-Python path (what PYSPARK_GAZETTE_NATIVE_JSON=0 gives)
    c: dict = {}
    c["ours"] = lambda ps: sum(dec.decode(v, {}).num_rows for v in ps)
    native = TypedDecoder(schema)
    if native._scan_plan is not None:
        c["ours, C scanner"] = lambda ps: sum(native.decode(v, {}).num_rows for v in ps)

    def pj_with(s: pa.Schema):
        opts = pj.ParseOptions(explicit_schema=s, unexpected_field_behavior="ignore")

        def run(ps):
            return sum(pj.read_json(pa.BufferReader(joined(v)), parse_options=opts).num_rows for v in ps)

        return run

    c["pyarrow.json ts as string"] = pj_with(as_string)
    c["pyarrow.json ts native"] = pj_with(out_schema)
    if nested:
        try:
            import polars as pl

            pl_schema = {f.name: pl.from_arrow(pa.array([], f.type)).dtype for f in out_schema}
            c["polars read_ndjson"] = lambda ps: sum(
                pl.read_ndjson(io.BytesIO(joined(v).to_pybytes()), schema=pl_schema).height for v in ps
            )
        except ImportError:
            pass
        return c
    try:
        import polars as pl

        pl_schema = {f.name: pl.from_arrow(pa.array([], f.type)).dtype for f in out_schema}

        def polars(ps):
            return sum(pl.read_ndjson(io.BytesIO(joined(v).to_pybytes()), schema=pl_schema).height for v in ps)

        c["polars read_ndjson"] = polars
    except ImportError:
        pass
    try:
        import duckdb

        con = duckdb.connect()
        con.execute("SET threads=1")  # like one Spark task's worker
        cols = ", ".join(
            f"'{f.name}': '{'TIMESTAMPTZ' if pa.types.is_timestamp(f.type) else {'int64': 'BIGINT', 'double': 'DOUBLE'}.get(str(f.type), 'VARCHAR')}'"
            for f in out_schema
        )

        def duck(ps):
            import tempfile

            n = 0
            with tempfile.NamedTemporaryFile(suffix=".json") as f:
                for v in ps:
                    f.seek(0)
                    f.truncate()
                    f.write(joined(v).to_pybytes())
                    f.flush()
                    n += (
                        con.execute(
                            f"SELECT * FROM read_json('{f.name}', format='newline_delimited', columns={{{cols}}})"
                        )
                        .to_arrow_table()
                        .num_rows
                    )
            return n

        c["duckdb read_json (file)"] = duck
    except ImportError:
        pass
    names = [f.name for f in out_schema]
    for mod in ("orjson", "msgspec"):
        try:
            m = __import__(mod)
        except ImportError:
            continue
        loads = m.loads if mod == "orjson" else m.json.Decoder().decode

        def py_parse(ps, loads=loads):
            n = 0
            for v in ps:
                docs = [loads(x) for x in v.to_pylist()]
                cols = [pa.array([d.get(k) for d in docs]) for k in names]
                n += len(cols[0])
            return n

        c[f"{mod} + pa.array (no ts)"] = py_parse
    try:
        import simdjson

        parser = simdjson.Parser()

        def simd(ps):
            n = 0
            for v in ps:
                rows = []
                for x in v.to_pylist():
                    d = parser.parse(x)
                    rows.append([d.get(k) for k in names])
                    del d
                cols = [pa.array([r[j] for r in rows]) for j in range(len(names))]
                n += len(cols[0])
            return n

        c["simdjson (lazy) + pa.array (no ts)"] = simd
    except ImportError:
        pass
    return c


def _timed(fn) -> float:
    t = time.process_time()
    fn()
    return time.process_time() - t


def map_cases(args) -> int:
    """MapType, on bench_read's nested events: a top-level map (``geo`` read as a map) and a map
    nested in a struct (``geo`` with an ``attrs`` map of 2 entries added to every record), each
    with maps beside pyarrow's columns (now) vs every record through the per-record rules (the
    path both took before: the decoder's own ``decode`` with ``_all_python`` set), and with
    ``--maps-against`` the same decode by another version of the module, loaded beside this one."""
    import json

    from pyspark.sql import types as T

    from bench_read import make_nested_lines
    from pyspark_gazette.spark.read.typed import TypedDecoder

    other = None
    if args.maps_against:
        import importlib.util

        spec = importlib.util.spec_from_file_location("typed_other", args.maps_against)
        assert spec is not None and spec.loader is not None
        other = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(other)
    print(f"load average {os.getloadavg()}")
    raw = make_nested_lines(max(4, args.mib // 4) << 20)
    nested = pieces(raw, int(args.piece * (1 << 20)))
    docs = [json.loads(line) for line in raw.splitlines()]
    for d in docs:
        d["geo"]["attrs"] = {"cc": d["geo"]["country"], "src": d["url"][-5:]}
    in_struct = pieces(
        b"".join(json.dumps(d, separators=(",", ":")).encode() + b"\n" for d in docs), int(args.piece * (1 << 20))
    )
    top = T.StructType(
        [
            T.StructField("event_id", T.LongType()),
            T.StructField("user_id", T.StringType()),
            T.StructField("amount", T.DoubleType()),
            T.StructField("geo", T.MapType(T.StringType(), T.StringType())),
        ]
    )
    geo = T.StructType(
        [
            T.StructField("country", T.StringType()),
            T.StructField("lat", T.DoubleType()),
            T.StructField("attrs", T.MapType(T.StringType(), T.StringType())),
        ]
    )
    nested_schema = T.StructType(
        [
            T.StructField("event_id", T.LongType()),
            T.StructField("user_id", T.StringType()),
            T.StructField("ts", T.TimestampType()),
            T.StructField("url", T.StringType()),
            T.StructField("amount", T.DoubleType()),
            T.StructField("geo", geo),
            T.StructField("tags", T.ArrayType(T.StringType())),
        ]
    )
    for label, schema, ps in (
        ("top-level map (geo as a map)", top, nested),
        ("map nested in a struct (geo.attrs)", nested_schema, in_struct),
    ):
        nbytes = sum(v.nbytes for v in ps) / 1e6
        dec, old = TypedDecoder(schema), TypedDecoder(schema)
        old._all_python = True  # every record through the per-record rules: the path before
        rows = sum(len(v) for v in ps)

        def run(d, ps=ps):
            return sum(d.decode(v, {}).num_rows for v in ps)

        assert run(dec) == run(old) == rows and dec.errors == old.errors == 0
        base = other.TypedDecoder(schema) if other else None
        if base is not None:
            assert all(base.decode(v, {}).equals(dec.decode(v, {})) for v in ps)
        t_old = t_new = t_base = float("inf")
        for _ in range(args.rounds):  # interleaved
            t_old = min(t_old, _timed(lambda d=old: run(d)))
            t_new = min(t_new, _timed(lambda d=dec: run(d)))
            if base is not None:
                t_base = min(t_base, _timed(lambda d=base: run(d)))
        print(
            f"  {label} ({nbytes:.0f} MB): maps beside pyarrow {nbytes / t_new:.1f} MB/s, "
            f"every record per-record (before) {nbytes / t_old:.1f} MB/s: x{t_old / t_new:.2f}"
            + (f"; {args.maps_against} {nbytes / t_base:.1f} MB/s: x{t_base / t_new:.2f}" if base else "")
        )
    print(f"load average {os.getloadavg()}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mib", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--piece", type=float, default=1.0, help="MiB fed to the line splitter (default 1)")
    p.add_argument("--big", type=float, default=8.0, help="MiB of the larger pieces (default 8)")
    p.add_argument("--profile", action="store_true")
    p.add_argument(
        "--shape", default="clicks", choices=("clicks", "nested"), help="bench_read's records (default %(default)s)"
    )
    p.add_argument("--maps-only", action="store_true", help="only the MapType cases")
    p.add_argument(
        "--maps-against",
        metavar="TYPED_PY",
        help="also time the MapType cases with another version of spark/read/typed.py (e.g. from git show)",
    )
    args = p.parse_args()
    if args.maps_only:
        return map_cases(args)
    nested = args.shape == "nested"
    data = (make_nested_lines if nested else make_lines)(args.mib << 20)
    mb = len(data) / 1e6
    small = pieces(data, int(args.piece * (1 << 20)))
    big = pieces(data, int(args.big * (1 << 20)))
    full_ddl, two_ddl = (NESTED_SCHEMA, NESTED_TWO_FIELDS) if nested else (SCHEMA, TWO)
    n_fields = len(_split(full_ddl))
    print(
        f"{mb:.1f} MB of {args.shape} events; {len(small)} pieces of ~{len(small[0])} rows ({args.piece} MiB), "
        f"{len(big)} of ~{len(big[0])} rows ({args.big} MiB); load average {os.getloadavg()}"
    )
    rows = sum(len(v) for v in small)
    cases = {}
    two = f"2 of {n_fields}"
    for label, ddl in (("full", full_ddl), (two, two_ddl)):
        for name, fn in contenders(ddl, nested).items():
            cases[f"{label}: {name}"] = (fn, small)
            if name.startswith("ours"):
                cases[f"{label}: {name}, {args.big} MiB pieces"] = (fn, big)
    best: dict[str, float] = {}
    for _ in range(args.rounds):
        for name, (fn, ps) in cases.items():
            t = time.process_time()
            n = fn(ps)
            dt = time.process_time() - t
            assert n == rows, (name, n, rows)
            best[name] = min(best.get(name, dt), dt)
    for label in ("full", two):
        base = best[f"{label}: ours"]
        for name, s in best.items():
            if name.startswith(label + ":"):
                print(f"  {name:44s} {mb / s:7.1f} MB/s   x{base / s:5.2f} vs ours")
    print(f"  {two} fields vs full, ours: x{best['full: ours'] / best[f'{two}: ours']:.2f}")
    print(f"load average {os.getloadavg()}")
    if not nested:
        map_cases(args)
    if args.profile:
        from pyspark_gazette.spark.read.typed import TypedDecoder

        dec = TypedDecoder(spark_schema(full_ddl))
        prof = cProfile.Profile()
        prof.enable()
        for v in small:
            dec.decode(v, {})
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(18)
    return 0


if __name__ == "__main__":
    sys.exit(main())
