#!/usr/bin/env python3
"""Scale: planning cost against the number of persisted fragments of one journal.

    .venv/bin/python bench/scale_fragments.py [--fragments 100,1000,10000,100000] [--rounds 3] [--window 100]
        [--tail 10] [--spark-max 100000] [--gazette-max 100000] [--no-gazette]

For each fragment count N, one ndjson journal of N small fragments (one line each, ZSTANDARD,
persisted one second apart) is written straight into a file store, then the journal is created
(Apply), so that the broker's first store listing indexes them all; the bench waits until
ListFragments returns all N. Brokers: the embedded broker in a process of its own (``python -m
pyspark_gazette.broker``, so this process's memory is the driver's alone) and, up to
``--gazette-max`` fragments, real Gazette (tests/realgazette.py: etcd and one ``gazette serve``
from ``.bin/``, or from ``GAZETTE_BIN_DIR``; skipped when they are not installed).

Measured in this process (the driver's planning, no Spark), best of ``--rounds``:

* ``list``: ListFragments alone, every page (the floor of any plan of the whole journal);
* ``batch``: a batch read's planning, ``GazetteBatchReader.partitions()`` (List, ListFragments
  pages, settling, segments, packing); goal < 2 s and < 300 MB at 100k fragments;
* ``window``: the same with ``startingTimestamp``/``endingTimestamp`` selecting ``--window``
  fragments in the middle of the journal (planned from listings of the range alone: the broker
  filters by persist time); ``window floor``: one ListFragments with the same bounds as
  ``begin_mod_time``/``end_mod_time``;
* ``stream first``: a stream's first trigger over the whole journal (``initialOffset`` at
  earliest, then ``latestOffset`` and ``partitions``); ``stream tail``: a steady-state trigger
  after ``--tail`` one-line appends (live content, read through the broker);
* ``count``: ``spark.read.format("gazette")...count()`` on local[2], embedded broker only, up to
  ``--spark-max`` fragments (one round above 10k: each fragment is a file a task opens).

Driver memory of a step is its peak RSS growth: ``VmHWM`` is reset (``/proc/self/clear_refs``)
before the call and compared with the RSS then; the largest growth of the rounds is kept.
Writes docs/scale/fragments.json and docs/scale/fragments.png (bench/scalelib.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

CURVE = "fragments"
#: The store of the journals, under the brokers' file root.
STORE = "file:///scale/"
#: Goals of the issue at 100k fragments.
GOAL_SECONDS, GOAL_MIB = 2.0, 300.0
#: Whether the Spark session ran a query already (its first starts the Python workers).
WARM: list[bool] = []
STEPS = ("list", "batch", "window", "window floor", "stream first", "stream tail")


def line(i: int) -> bytes:
    return json.dumps({"i": i, "user": f"u{i * 7919 % 100003:06d}", "amount": i % 1000 / 10}).encode() + b"\n"


def write_fragments(file_root: str, journal: str, n: int, first_persist: int) -> int:
    """``n`` one-line ZSTANDARD fragments of ``journal`` straight into the store under
    ``file_root``, fragment ``i`` persisted at ``first_persist + i``; returns the journal's length."""
    from pyspark_gazette.fragments import FragmentRef, compress_bytes
    from pyspark_gazette.protocol import pb

    offset = 0
    made: set[str] = set()
    for i in range(n):
        content = line(i)
        ref = FragmentRef(journal, offset, offset + len(content), hashlib.sha1(content).hexdigest(), pb.ZSTANDARD)
        path = os.path.join(file_root, STORE[len("file:///") :], ref.content_path)
        folder = os.path.dirname(path)
        if folder not in made:
            os.makedirs(folder, exist_ok=True)
            made.add(folder)
        with open(path, "wb") as f:
            f.write(compress_bytes(pb.ZSTANDARD, content))
        os.utime(path, (first_persist + i, first_persist + i))
        offset += len(content)
    return offset


def reset_peak() -> float:
    """Reset this process's peak RSS (VmHWM) to its RSS; returns the RSS, MiB."""
    from scalelib import rss_mib

    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return rss_mib(os.getpid())


def measured(fn, rounds: int) -> tuple[list[float], float, Any]:
    """``fn()`` ``rounds`` times: the times, the largest peak RSS growth (MiB) and the last result."""
    from scalelib import peak_rss_mib

    times, grow, out = [], 0.0, None
    for _ in range(rounds):
        out = None  # not held across rounds: each round's peak is its own
        before = reset_peak()
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
        grow = max(grow, peak_rss_mib(os.getpid()) - before)
    return times, grow, out


class Backend:
    """A broker to plan against: ``embedded`` (its own process) or ``gazette``."""

    def __init__(self, kind: str, work: str):
        self.kind, self.work = kind, os.path.join(work, kind)
        os.makedirs(self.work)
        self.proc: Any = None
        self.cluster: Any = None

    def __enter__(self) -> Backend:
        if self.kind == "embedded":
            from pyspark_gazette.broker.main import spawn_broker

            self.file_root = os.path.join(self.work, "store")
            os.makedirs(self.file_root)
            self.proc, self.address = spawn_broker(os.path.join(self.work, "broker"), self.file_root)
            self.pid = self.proc.pid
        else:
            sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
            from realgazette import GazetteCluster

            self.cluster = GazetteCluster(os.path.join(self.work, "gazette"), brokers=1)
            self.cluster.start()
            self.file_root = self.cluster.file_root
            self.address = self.cluster.address
            self.pid = self.cluster.brokers[0].pid
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except Exception:  # noqa: BLE001 - a broker that does not stop is killed
                self.proc.kill()
                self.proc.wait()
        if self.cluster is not None:
            self.cluster.stop()

    def create(self, client, journal: str, refresh_seconds: int) -> None:
        from benchlib import ndjson_spec
        from pyspark_gazette.client import Change

        spec = ndjson_spec(journal, 1 << 30, store=STORE, refresh_seconds=refresh_seconds)
        if self.cluster is not None:
            self.cluster.apply_specs([spec], timeout=120)
        else:
            client.apply([Change(0, upsert=spec)])

    def delete(self, client, journal: str) -> None:
        """Drop the journal (no more store listings of it by the broker)."""
        from pyspark_gazette.client import Change

        info = client.get_journal(journal)
        client.apply([Change(info.mod_revision, delete=journal)])


def wait_indexed(client, journal: str, n: int, timeout: float) -> float:
    """Seconds until ListFragments of ``journal`` returns ``n`` fragments."""
    t = time.perf_counter()
    while True:
        try:
            got = len(client.list_fragments(journal))
        except Exception:  # noqa: BLE001 - not routed yet
            got = -1
        if got >= n:
            return time.perf_counter() - t
        if time.perf_counter() - t > timeout:
            raise TimeoutError(f"{journal}: {got} of {n} fragments listed after {timeout:.0f}s")
        time.sleep(0.2)


def one_size(backend: Backend, n: int, args, spark) -> dict[str, Any]:
    from pyspark.sql.streaming.datasource import ReadAllAvailable

    from pyspark_gazette.client import ClientConfig, JournalClient
    from pyspark_gazette.spark.options import ReadOptions
    from pyspark_gazette.spark.read.arrow_output import untyped_schema
    from pyspark_gazette.spark.read.batch_scan import GazetteBatchReader
    from pyspark_gazette.spark.read.stream import GazetteStreamReader
    from scalelib import rss_mib

    journal = f"scale/frags-{n}"
    first_persist = int(time.time()) - 30 * 86400 - n  # old: no hole or spool judgement by age
    row: dict[str, Any] = {"fragments": n}
    t = time.perf_counter()
    length = write_fragments(backend.file_root, journal, n, first_persist)
    row["write_s"] = round(time.perf_counter() - t, 2)
    client = JournalClient(ClientConfig(backend.address, file_root=backend.file_root))
    try:
        t = time.perf_counter()
        backend.create(client, journal, args.refresh)
        row["index_s"] = round(time.perf_counter() - t + wait_indexed(client, journal, n, args.index_timeout), 2)
        row["broker_rss_mib"] = round(rss_mib(backend.pid), 1)
        print(
            f"  {backend.kind} {n:>7} fragments ({length / 1e6:.1f} MB): written {row['write_s']}s, "
            f"indexed {row['index_s']}s, broker RSS {row['broker_rss_mib']} MiB",
            flush=True,
        )
        schema = untyped_schema(True, False)
        base = {"broker.address": backend.address, "store.fileRoot": backend.file_root, "journals": journal}
        mid = n // 2 - args.window // 2
        lo, hi = first_persist + mid, first_persist + mid + min(args.window, n) - 1
        window = {**base, "startingTimestamp": str(lo * 1000), "endingTimestamp": str(hi * 1000)}
        times: dict[str, list[float]] = {}
        memory: dict[str, float] = {}

        def step(name: str, fn):
            times[name], memory[name], out = measured(fn, args.rounds)
            return out

        listed = step("list", lambda: client.list_fragments(journal))
        assert len(listed) == n, len(listed)
        del listed
        ro = ReadOptions.parse(base)
        parts = step("batch", lambda: GazetteBatchReader(ro, schema).partitions())
        row["batch_partitions"] = len(parts)
        del parts
        rw = ReadOptions.parse(window)
        parts = step("window", lambda: GazetteBatchReader(rw, schema).partitions())
        row["window_fragments"] = sum(1 for p in parts for s in _segments(p) if s.fragment is not None)
        assert row["window_fragments"] == min(args.window, n), row["window_fragments"]
        del parts
        floor = step("window floor", lambda: client.list_fragments(journal, begin_mod_time=lo, end_mod_time=hi))
        row["window_floor_fragments"] = len(floor)
        del floor

        if spark is not None and n <= args.spark_max:
            rounds = args.rounds if n <= 10_000 else 1
            reader = spark.read.format("gazette")
            for k, v in base.items():
                reader = reader.option(k, v)
            if not WARM:  # the session's first query starts the Python workers: not timed
                reader.load().count()
                WARM.append(True)
            counts = []
            for _ in range(rounds):
                t = time.perf_counter()
                got = reader.load().count()
                counts.append(time.perf_counter() - t)
                assert got == n, got
            row["count_s"] = [round(x, 3) for x in counts]

        # Streams: the first trigger over the whole journal, then a steady-state one.
        so = ReadOptions.parse({**base, "startingOffsets": "earliest"}, streaming=True)
        sr = GazetteStreamReader(so, schema)
        try:
            start = sr.initialOffset()
            limit = ReadAllAvailable()

            def trigger(frm: dict):
                end = sr.latestOffset(frm, limit)
                return end, sr.partitions(frm, end)

            end, parts = step("stream first", lambda: trigger(start))
            row["stream_first_partitions"] = len(parts)
            del parts
            for i in range(args.tail):
                # The first at an explicit offset, the journal's end: Gazette's spool starts at 0 when
                # the journal is assigned, and refuses an append without one (INDEX_HAS_GREATER_OFFSET)
                # until its index of the store's fragments is in it.
                client.append(journal, line(n + i), **({"offset": length} if i == 0 else {}))
            tail_end, parts = step("stream tail", lambda: trigger(end))
            row["stream_tail_partitions"] = len(parts)
            row["stream_tail_bytes"] = sum(p.length for p in parts)
            del parts
            assert tail_end != end
        finally:
            sr.stop()
        row["time_s"] = {k: [round(x, 4) for x in v] for k, v in times.items()}
        row["best_s"] = {k: round(min(v), 4) for k, v in times.items()}
        row["peak_rss_growth_mib"] = {k: round(v, 1) for k, v in memory.items()}
        print(
            "    "
            + ", ".join(f"{k} {row['best_s'][k] * 1000:.0f} ms / +{memory[k]:.0f} MiB" for k in STEPS)
            + (f"; count {min(row['count_s']):.2f}s" if "count_s" in row else ""),
            flush=True,
        )
        print(
            f"    window: {row['window_fragments']} fragments planned, {row['window_floor_fragments']} listed by the "
            f"broker with begin/end_mod_time; batch {row['batch_partitions']} partitions",
            flush=True,
        )
        backend.delete(client, journal)
    finally:
        client.close()
    return row


def _segments(part) -> list:
    members = getattr(part, "members", None)
    if members is not None:
        return [s for m in members for s in m.segments]
    return list(part.segments)


def draw(record: dict[str, Any]) -> None:
    """docs/scale/fragments.png from a saved record: planning time, driver memory, count()."""
    from scalelib import figure, finish

    fig, (ax_t, ax_m, ax_c) = figure("Planning one journal of N persisted fragments", record, panels=3, width=5.0)
    styles = {"embedded": "-", "gazette": "--"}
    colours = dict(zip(STEPS, ("0.5", "C0", "C1", "C4", "C2", "C3"), strict=True))
    for kind, rows in record["results"].items():
        if not rows:
            continue
        xs = [r["fragments"] for r in rows]
        for s in STEPS:
            ys = [r["best_s"][s] for r in rows]
            ax_t.plot(xs, ys, styles[kind], marker="o", color=colours[s], label=f"{s} ({kind})", markersize=3)
            if s in ("batch", "window", "stream first", "stream tail"):
                ax_m.plot(
                    xs,
                    [max(r["peak_rss_growth_mib"][s], 0.1) for r in rows],
                    styles[kind],
                    marker="o",
                    color=colours[s],
                    label=f"{s} ({kind})",
                    markersize=3,
                )
        counted = [r for r in rows if "count_s" in r]
        if counted:
            ax_c.plot(
                [r["fragments"] for r in counted],
                [min(r["count_s"]) for r in counted],
                styles[kind],
                marker="o",
                label=f"count() ({kind})",
            )
            ax_c.plot(
                [r["fragments"] for r in counted],
                [r["best_s"]["batch"] for r in counted],
                styles[kind],
                marker="o",
                color="C0",
                label=f"of which planning, in-process ({kind})",
                markersize=3,
            )
    ax_t.axhline(GOAL_SECONDS, color="k", lw=0.8, ls=":", label="goal at 100k: 2 s")
    ax_m.axhline(GOAL_MIB, color="k", lw=0.8, ls=":", label="goal at 100k: 300 MB")
    ax_t.set_title("driver planning time (best of rounds)", fontsize=9)
    ax_t.set_ylabel("seconds")
    ax_m.set_title("driver peak RSS growth during the call", fontsize=9)
    ax_m.set_ylabel("MiB")
    ax_c.set_title("spark.read...count() on local[2] (embedded)", fontsize=9)
    ax_c.set_ylabel("seconds")
    for ax in (ax_t, ax_m, ax_c):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("persisted fragments of the journal")
        ax.grid(True, which="major", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=6)
    finish(fig, CURVE)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--fragments", default="100,1000,10000,100000", help="fragment counts (default %(default)s)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--window", type=int, default=100, help="fragments a windowed read selects")
    p.add_argument("--tail", type=int, default=10, help="one-line appends before the steady-state trigger")
    p.add_argument("--refresh", type=int, default=30, help="the journals' fragment refresh interval, seconds")
    p.add_argument("--index-timeout", type=float, default=600, help="seconds a broker may take to list the store")
    p.add_argument("--spark-max", type=int, default=100_000, help="count() up to this many fragments (0: none)")
    p.add_argument("--gazette-max", type=int, default=100_000, help="real Gazette up to this many fragments")
    p.add_argument("--no-gazette", action="store_true", help="the embedded broker only")
    args = p.parse_args()
    sizes = [int(x) for x in args.fragments.split(",")]

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks: stop every process
    from benchlib import local_spark
    from scalelib import LoadSampler, save

    kinds = ["embedded"]
    if not args.no_gazette and any(n <= args.gazette_max for n in sizes):
        sys.path.insert(0, os.path.join(os.path.dirname(HERE), "tests"))
        import realgazette

        if realgazette.missing():
            print(f"real Gazette not installed ({', '.join(realgazette.missing())} missing): embedded broker only")
        else:
            kinds.append("gazette")
    work = tempfile.mkdtemp(prefix="scale-frags-", dir=os.environ.get("BENCH_TMP"))  # never inside the repository
    results: dict[str, list] = {k: [] for k in kinds}
    spark = None
    try:
        with LoadSampler() as load:
            if args.spark_max > 0:
                spark = local_spark(**{"spark.driver.memory": "2g", "spark.ui.showConsoleProgress": "false"})
            for kind in kinds:
                print(f"== {kind} broker", flush=True)
                with Backend(kind, work) as backend:
                    for n in sizes:
                        if kind == "gazette" and n > args.gazette_max:
                            continue
                        results[kind].append(one_size(backend, n, args, spark if kind == "embedded" else None))
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    data = {
        "unit": "seconds (best of rounds); driver memory: peak RSS growth during the call, MiB",
        "rounds": args.rounds,
        "window": args.window,
        "tail_appends": args.tail,
        "goals": {"fragments": 100_000, "seconds": GOAL_SECONDS, "driver_mib": GOAL_MIB},
        "results": results,
    }
    save(CURVE, data, load)
    from scalelib import load_record

    draw(load_record(CURVE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
