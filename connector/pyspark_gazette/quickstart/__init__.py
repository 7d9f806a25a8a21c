"""The quickstart job (``pyspark-gazette quickstart``, the README's main command).

Seven steps, each timed, each checked, on one machine:

1. start a quiet local[2] SparkSession (UTC, no UI; executors run ``sys.executable``);
2. start an embedded broker with a local ``file://`` fragment store and create the journals of
   the packaged ``quickstart.yaml`` (``pyspark_gazette/resources``; ``--specs FILE`` for your own);
3. write ``--rows`` generated click events with ``df.write.format("gazette")``;
4. roll the clicks journal's open spool, wait until every fragment is persisted and the broker's
   index lists the store, so the next read takes the fragments straight from the files;
5. a typed batch aggregation (``.schema(...)``, ``groupBy("country")``) over exactly the bytes
   step 3 wrote, compared with the same aggregation computed from the generator;
6. an exactly-once stream (``readStream`` -> checkout clicks -> ``writeStream``,
   ``trigger(availableNow=True)``) from the clicks to a second journal, which must then hold
   exactly the transformed rows of the clicks journal;
7. the same stream again from the same checkpoint, which must add nothing.

Everything the job writes goes under its data directory (:func:`default_data_dir` unless
``--data-dir`` names one); nothing is read from the working directory or a source checkout, so
the installed package runs from anywhere. The data directory is wiped at the start of every run;
``keep=True`` (``--keep``) reuses it instead: the journals keep their earlier content, the new
events continue the earlier ids (``state.json``), and the stream resumes from its checkpoint.
Any failed step or check prints ``error: [step] ...`` and the job exits 1.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib.resources
import json
import os
import pathlib
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

from pyspark_gazette.broker import EmbeddedBroker
from pyspark_gazette.client import Change, ClientConfig, JournalClient
from pyspark_gazette.client.specs import load_spec_file, load_specs
from pyspark_gazette.protocol.labels import CONTENT_TYPE, label_values

#: Package data (``pyspark_gazette/resources``): the journals and Spark's JVM logging set-up.
SPECS = "quickstart.yaml"
LOG4J = "log4j2.properties"
CLICKS = "quickstart/clicks"
CHECKOUTS = "quickstart/checkouts"
STEPS = 7
#: Rows per Spark task of the write (each task is one Append; several, so progress shows, both
#: cores work and the journal rolls into several fragments), and the fewest tasks.
ROWS_PER_TASK = 25_000
MIN_TASKS = 4


class CheckFailed(Exception):
    """A quickstart check found data that is not what was written."""


def _say(text: str = "") -> None:
    print(text, flush=True)


def resource(name: str) -> Any:
    """A file shipped inside the package (a ``Traversable``; see :mod:`importlib.resources`)."""
    return importlib.resources.files("pyspark_gazette") / "resources" / name


def packaged_specs() -> str:
    """The quickstart's journal specs (gazctl's YAML), as ``--print-specs`` prints them."""
    return str(resource(SPECS).read_text(encoding="utf-8"))


def default_data_dir() -> pathlib.Path:
    """Where the quickstart writes without ``--data-dir``: ``$XDG_CACHE_HOME/pyspark-gazette/quickstart``,
    ``~/.cache/pyspark-gazette/quickstart`` when ``XDG_CACHE_HOME`` is unset."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(pathlib.Path.home() / ".cache")
    return pathlib.Path(cache) / "pyspark-gazette" / "quickstart"


@dataclasses.dataclass
class Steps:
    """Numbered steps with their timings; remembers the running one for error messages."""

    timings: dict[str, float] = dataclasses.field(default_factory=dict)
    current: str = "setup"

    @contextmanager
    def step(self, number: int, key: str, title: str) -> Iterator[None]:
        self.current = f"[{number}/{STEPS}] {key}"
        _say(f"[{number}/{STEPS}] {title}")
        t = time.perf_counter()
        yield
        self.timings[key] = time.perf_counter() - t


def write_head(client: Any, journal: str) -> int:
    return max((f.spec.end for f in client.list_fragments(journal)), default=0)


def _state(root: pathlib.Path) -> dict[str, int]:
    path = root / "state.json"
    return json.loads(path.read_text()) if path.exists() else {"next_event_id": 0, "runs": 0}


def run_quickstart(
    data_dir: str | os.PathLike[str] | None = None,
    rows: int = 250_000,
    keep: bool = False,
    specs: str | os.PathLike[str] | None = None,
) -> int:
    """Run the quickstart; 0 when every step and check passed, 1 otherwise, 2 for bad arguments.

    ``data_dir`` defaults to :func:`default_data_dir`; ``specs`` is a YAML file of journal specs
    to use instead of the packaged ones (it must define ``quickstart/clicks`` and
    ``quickstart/checkouts``, ndjson journals)."""
    if rows <= 0:
        print("error: --rows must be positive", file=sys.stderr)
        return 2
    try:
        nodes = _load_specs(specs)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    root = pathlib.Path(data_dir if data_dir is not None else default_data_dir()).expanduser().resolve()
    steps = Steps()
    try:
        if root.exists() and not keep:
            _wipe(root)
        (root / "store").mkdir(parents=True, exist_ok=True)
        report = _run(root, rows, keep, steps, nodes, str(specs) if specs else f"the packaged {SPECS}")
    except CheckFailed as e:
        print(f"error: {steps.current}: check failed: {e}", file=sys.stderr)
        return 1
    except Exception as e:
        print(f"error: {steps.current} failed: {_one_line(e)}", file=sys.stderr)
        return 1
    _print_report(report, steps, root, keep)
    return 0


#: Everything a quickstart run leaves in its data directory.
OWN_ENTRIES = frozenset({"broker", "store", "checkpoints", "state.json"})


def _load_specs(specs: str | os.PathLike[str] | None) -> list[Any]:
    """The journal specs to create: ``specs`` (a file) or the packaged ones; a file must define
    both quickstart journals, as ndjson."""
    if specs is None:
        return load_specs(packaged_specs())
    nodes = load_spec_file(str(specs), "--specs")  # InvalidInputError is a ValueError
    named = {n.spec.name: n.spec for n in nodes if not n.delete}
    missing = [j for j in (CLICKS, CHECKOUTS) if j not in named]
    if missing:
        raise ValueError(
            f"--specs {specs}: defines no journal {' or '.join(missing)}; the quickstart writes to "
            f"{CLICKS} and {CHECKOUTS} (start from `pyspark-gazette quickstart --print-specs`)"
        )
    for name in (CLICKS, CHECKOUTS):
        types = label_values(named[name].labels, CONTENT_TYPE)
        if types != ["application/x-ndjson"]:
            raise ValueError(f"--specs {specs}: journal {name} must have content-type application/x-ndjson")
    return nodes


def _wipe(root: pathlib.Path) -> None:
    """Remove an earlier run's data directory; refuse anything else (a mistyped ``--data-dir``
    must not delete someone's files)."""
    if not root.is_dir():
        raise NotADirectoryError(f"data directory {root} exists and is not a directory")
    foreign = sorted(p.name for p in root.iterdir() if p.name not in OWN_ENTRIES)
    if foreign:
        raise FileExistsError(
            f"refusing to wipe {root}: it holds {', '.join(foreign[:5])}, which a quickstart run does not write"
        )
    shutil.rmtree(root)


def _one_line(e: BaseException) -> str:
    """The gist of an error: Spark wraps a Python worker's error in its whole traceback; keep the
    last line naming an exception of ours (it names the option, journal or offset)."""
    text = str(e).strip() or type(e).__name__
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    ours = [ln for ln in lines if "pyspark_gazette.errors." in ln or ln.startswith("pyspark_gazette")]
    return ours[-1] if ours else f"{type(e).__name__}: {lines[0] if lines else text}"


def _run(root: pathlib.Path, rows: int, keep: bool, steps: Steps, nodes: list[Any], specs: str) -> dict[str, Any]:
    state = _state(root)
    first_id = state["next_event_id"]
    store = root / "store"
    report: dict[str, Any] = {"rows": rows, "first_id": first_id}
    _say(f"pyspark-gazette quickstart: {rows:,} click events, data in {root}{' (kept)' if keep else ''}")
    os.environ["PYSPARK_PYTHON"] = sys.executable  # executors must import this very installation
    with ExitStack() as stack:
        # Spark first: its JVM is forked before any gRPC thread exists in this process.
        with steps.step(1, "spark", "local[2] SparkSession"):
            from pyspark_gazette.quickstart import spark_job as job

            log4j = stack.enter_context(importlib.resources.as_file(resource(LOG4J)))
            spark = job.start_session(log4j)
            stack.callback(spark.stop)
            _say(f"      Spark {spark.version}, session time zone UTC")
        with steps.step(2, "broker", "embedded broker and journals"):
            broker = stack.enter_context(EmbeddedBroker(str(root / "broker"), file_root=str(store)))
            client = stack.enter_context(JournalClient(ClientConfig(broker.address, file_root=str(store))))
            client.apply([Change(expect_mod_revision=-1, upsert=n.spec) for n in nodes if not n.delete])
            _say(f"      broker {broker.address}, fragment store {store.as_uri()}/")
            _say(f"      {len(nodes)} journals from {specs}: {', '.join(n.spec.name for n in nodes)}")
        _run_spark(root, broker, client, state, report, steps, spark)
    return report


def _run_spark(
    root: pathlib.Path, broker: Any, client: Any, state: dict, report: dict, steps: Steps, spark: Any
) -> None:
    from pyspark_gazette.quickstart import spark_job as job

    rows, first_id = report["rows"], report["first_id"]
    conn = {"broker.address": broker.address, "store.fileRoot": str(root / "store")}
    generated = job.clicks(spark, first_id, rows, max(MIN_TASKS, -(-rows // ROWS_PER_TASK)))

    with steps.step(3, "write", f"df.write.format('gazette'): {rows:,} click events into {CLICKS}"):
        begin = write_head(client, CLICKS)
        with job.job_progress(spark, "writing", _say):
            job.write(generated, {**conn, "journal": CLICKS})
        end = write_head(client, CLICKS)
        (root / "state.json").write_text(
            json.dumps({"next_event_id": first_id + rows, "runs": state.get("runs", 0) + 1})
        )
        if end <= begin:
            raise CheckFailed(f"the write head of {CLICKS} did not move from {begin}")
        report.update(write_begin=begin, write_end=end)
        _say(f"      {end - begin:,} bytes at offsets [{begin:,}, {end:,})")

    with steps.step(4, "persist", "persisting rolled fragments to the store"):
        # Roll the open spool too: otherwise the broker persists it at the next flush-interval
        # boundary, which may fall between this step's listing and Spark's own plan.
        broker.roll(CLICKS)
        if not broker.wait_persisted(120):
            raise CheckFailed("rolled fragments were not persisted within 120 s")
        broker.refresh(CLICKS)
        written = {
            **conn,
            "journals": CLICKS,
            "startingOffsets": json.dumps({CLICKS: begin}),
            "endingOffsets": json.dumps({CLICKS: end}),
            "maxPartitionBytes": "8m",
        }
        # One listing for this step, the next and the report, so they state the same fragments
        # (the broker may persist a spool in between; the read plans from its own listing).
        plan = job.planned_read(written)
        frags = plan.direct_fragments + plan.broker_fragments
        report.update(fragments=frags, persisted=plan.direct_fragments)
        _say(
            f"      {plan.direct_fragments} of {_n(frags, 'fragment')} persisted"
            + (
                f"; {plan.broker_fragments} still in the broker's spool (read through the broker)"
                if plan.broker_fragments
                else ""
            )
        )

    with steps.step(5, "aggregate", "typed batch aggregation: clicks by country, read from the journal"):
        with job.job_progress(spark, "aggregating", _say):
            got = {
                r["country"]: r.asDict() for r in job.by_country(job.reader(spark, written, job.CLICK_SCHEMA)).collect()
            }
        want = {r["country"]: r.asDict() for r in job.by_country(generated).collect()}
        _compare_totals(got, want)
        report.update(plan=plan, totals=got)
        _say(
            f"      {len(got)} countries; totals equal those of the generated data; {_n(plan.partitions, 'read task')} "
            f"(Spark partitions): {_n(plan.direct_fragments, 'fragment file')} read directly, "
            f"{_n(plan.broker_ranges, 'range')} through the broker"
        )

    source = {**conn, "journals": CLICKS, "startingOffsets": "earliest", "maxBytesPerTrigger": "8m"}
    sink = {"broker.address": broker.address, "journal": CHECKOUTS}
    checkpoint = str(root / "checkpoints" / "checkouts")
    with steps.step(6, "stream", f"exactly-once stream {CLICKS} -> checkouts -> {CHECKOUTS} (AvailableNow)"):
        b_begin = write_head(client, CHECKOUTS)
        first = job.run_stream(spark, source, sink, checkpoint, _say)
        b_end = write_head(client, CHECKOUTS)
        out_rows = _check_stream(spark, job, conn)
        report.update(stream=first, stream_bytes=b_end - b_begin, checkouts=out_rows)
        _say(
            f"      {first.input_rows:,} rows in, {CHECKOUTS} holds exactly the {out_rows:,} checkout rows of {CLICKS}"
        )

    with steps.step(7, "rerun", "the same stream again, from the same checkpoint"):
        second = job.run_stream(spark, source, sink, checkpoint, _say)
        after = write_head(client, CHECKOUTS)
        if second.input_rows or after != b_end:
            raise CheckFailed(f"the re-run read {second.input_rows} rows and moved {CHECKOUTS} from {b_end} to {after}")
        report.update(rerun=second)
        _say(f"      {_n(second.batches, 'micro-batch')}, 0 rows: nothing new, nothing written twice")


def _n(count: int, noun: str) -> str:
    """``1 fragment``, ``2 fragments``, ``1 micro-batch``, ``0 micro-batches``."""
    plural = noun + ("es" if noun.endswith(("ch", "sh", "s", "x")) else "s")
    return f"{count:,} {noun if count == 1 else plural}"


def _compare_totals(got: dict[str, dict], want: dict[str, dict]) -> None:
    if set(got) != set(want):
        raise CheckFailed(f"countries read {sorted(got)} differ from those generated {sorted(want)}")
    for country, expected in sorted(want.items()):
        for field, value in expected.items():
            if got[country][field] != value:
                raise CheckFailed(f"country {country}: {field} read {got[country][field]} but generated {value}")
    for country, row in got.items():
        if row["clicks"] != row["events"]:
            raise CheckFailed(f"country {country}: {row['clicks'] - row['events']} duplicated events")


def _check_stream(spark: Any, job: Any, conn: dict[str, str]) -> int:
    """The checkouts journal must hold exactly ``checkouts(clicks journal)``, as multisets."""
    expected_df = job.checkouts(job.reader(spark, {**conn, "journals": CLICKS}, job.CLICK_SCHEMA))
    schema = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in expected_df.schema.fields)
    # A few percent of the clicks: small enough to compare on the driver, in two Spark jobs.
    expected = collections.Counter(tuple(r) for r in expected_df.collect())
    actual = collections.Counter(tuple(r) for r in job.reader(spark, {**conn, "journals": CHECKOUTS}, schema).collect())
    missing, extra = expected - actual, actual - expected
    if missing or extra:
        sample = next(iter(missing or extra))
        raise CheckFailed(
            f"{CHECKOUTS} lacks {sum(missing.values())} transformed rows of {CLICKS} and has "
            f"{sum(extra.values())} rows too many (e.g. event {sample[0]})"
        )
    return sum(actual.values())


def _print_report(r: dict[str, Any], steps: Steps, root: pathlib.Path, keep: bool) -> None:
    plan, t, s1, s2 = r["plan"], steps.timings, r["stream"], r["rerun"]
    size = r["write_end"] - r["write_begin"]
    lines = [
        ("rows written (df.write)", f"{r['rows']:,} ({size:,} bytes; event ids from {r['first_id']:,})"),
        (
            f"{CLICKS} fragments written",
            # Step 4's listing, which steps 4 and 5 printed too.
            f"{r['fragments']}: {plan.direct_fragments} persisted / {plan.broker_fragments} in the spool",
        ),
        (
            "aggregation read directly from files",
            f"{_n(plan.direct_fragments, 'fragment')}, {plan.direct_bytes:,} bytes",
        ),
        (
            "aggregation read through the broker",
            f"{_n(plan.broker_fragments, 'spool fragment')} in {_n(plan.broker_ranges, 'range')}, "
            f"{plan.broker_bytes:,} bytes",
        ),
        # The read stage's tasks; the aggregation's progress line also counts the tasks after its shuffle.
        ("aggregation read tasks (Spark partitions)", f"{plan.partitions}"),
        ("stream run 1", f"{_n(s1.batches, 'micro-batch')}, {s1.input_rows:,} rows in"),
        ("stream run 2 (same checkpoint)", f"{_n(s2.batches, 'micro-batch')}, {s2.input_rows:,} rows in"),
        (f"rows in {CHECKOUTS}", f"{r['checkouts']:,} (exactly once; run 1 added {r['stream_bytes']:,} bytes)"),
        ("timings", ", ".join(f"{k} {v:.1f}s" for k, v in t.items())),
        ("total time", f"{sum(t.values()):.1f}s"),
        ("data directory", f"{root} ({'kept' if keep else 'wiped at start'}; --keep reuses it)"),
    ]
    width = max(len(label) for label, _ in lines)
    _say()
    _say("report")
    for label, value in lines:
        _say(f"  {label.ljust(width)} : {value}")
    _say(f"  clicks by country, this run:\n    {'country':8}{'clicks':>10}{'users':>8}{'avg ms':>9}")
    for c, row in sorted(r["totals"].items(), key=lambda kv: -kv[1]["clicks"]):
        _say(f"    {c:8}{row['clicks']:>10,}{row['users']:>8,}{row['duration_ms'] / row['clicks']:>9,.0f}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(run_quickstart())
