#!/usr/bin/env python3
"""Journals: how planning, a stream trigger and the planner's memory grow from 100 to 10,000 journals.

    PYSPARK_PYTHON=$PWD/.venv/bin/python .venv/bin/python bench/scale_journals.py
        [--journals 100,300,1000,3000,10000] [--brokers embedded-process,gazette] [--rounds 2] [--triggers 3]

For each broker (the embedded broker in a process of its own, as ``python -m
pyspark_gazette.broker`` runs it, and one real ``gazette serve`` v0.103.0 with etcd from
``.bin/``) and each journal count N, bench/bench_many.py's run: N one-message ndjson journals
and the same N lines as N files, on local[2]. Kept per N:

- ``count()`` over the N journals against ``spark.read.text`` over the N files (same run);
- the driver's planning of that read (best of ``--rounds``) and its peak Python memory
  (tracemalloc over one planning);
- a stream's ``latestOffset`` over the N journals, write heads swept (one Read per journal)
  and watched (the default from 128 journals);
- the median trigger time of a stream over the N journals where 10 receive a message each
  trigger, and of a stream over just those 10 (their ratio).

Goals from the issue: ``latestOffset`` under 500 ms at 10,000 journals when 10 are active;
planning and memory growing no faster than the journals. The embedded broker stops at
``--embedded-max`` (5,000): it keeps two open files per journal with content, so 10,000 journals
would need more than the 20,000 open files a process may have here (``ulimit -n``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "connector"))

import scalelib  # noqa: E402

CURVE = "journals"
BROKERS = {"embedded-process": "embedded broker (own process)", "gazette": "real Gazette v0.103.0"}


def draw(record: dict) -> None:
    fig, (ax_p, ax_l, ax_m) = scalelib.figure(
        "Many journals: planning, a trigger's latestOffset, memory", record, panels=3
    )
    for broker, rows in record["runs"].items():
        if not rows:
            continue
        ns = [r["journals"] for r in rows]
        label = BROKERS.get(broker, broker)
        ax_p.plot(ns, [r["plan"] for r in rows], "o-", label=f"planning, {label}")
        ax_p.plot(ns, [r["count_s"] for r in rows], "s--", label=f"count(), {label}", alpha=0.7)
        ax_l.plot(ns, [r["latest_watch"] * 1000 for r in rows], "o-", label=f"watched, {label}")
        ax_l.plot(ns, [r["latest"] * 1000 for r in rows], "s--", label=f"swept, {label}", alpha=0.7)
        ax_m.plot(ns, [r["plan_peak_mib"] for r in rows], "o-", label=label)
    text = next((rows for rows in record["runs"].values() if rows), [])
    if text:
        ax_p.plot([r["journals"] for r in text], [r["text_s"] for r in text], "k:", label="spark.read.text, N files")
    ax_l.axhline(500, color="r", lw=0.8, ls=":", label="goal 500 ms")
    for ax, ylabel in ((ax_p, "seconds"), (ax_l, "latestOffset (ms)"), (ax_m, "planner peak Python memory (MiB)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("journals")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=6)
        ax.grid(True, which="both", lw=0.3)
        scalelib.plain_ticks(ax)
    scalelib.finish(fig, CURVE)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--journals", default="100,300,1000,3000,10000")
    p.add_argument("--brokers", default="embedded-process,gazette")
    p.add_argument(
        "--embedded-max",
        type=int,
        default=5000,
        help="largest count on the embedded broker: it holds two open files per journal with content"
        " (a spool's data and commit log), so 10,000 journals need a limit on open files above 20,000",
    )
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--triggers", type=int, default=3)
    args = p.parse_args()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # run the finally blocks: stop the brokers

    import bench_many
    from benchlib import local_spark

    work = tempfile.mkdtemp(prefix="scale-journals-", dir=os.environ.get("BENCH_TMP"))
    spark = local_spark(**{"spark.sql.session.timeZone": "UTC", "spark.driver.memory": "2g"})
    runs: dict[str, list[dict]] = {}
    try:
        with scalelib.LoadSampler() as load:
            for broker in args.brokers.split(","):
                runs[broker] = []
                for n in (int(x) for x in args.journals.split(",")):
                    if broker != "gazette" and n > args.embedded_max:
                        print(f"{broker}: {n} journals skipped (--embedded-max {args.embedded_max})")
                        continue
                    many_args = argparse.Namespace(
                        rounds=args.rounds,
                        active=10,
                        triggers=args.triggers,
                        broker=broker,
                        no_stream=False,
                        watch="auto",
                        open_costs="",
                        brokers=1,
                        persisted=False,
                    )
                    runs[broker].append(bench_many.run(n, many_args, spark, work))
                    shutil.rmtree(os.path.join(work, f"n{n}"), ignore_errors=True)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(
        f"\n{'broker':18s} {'N':>6s} {'plan s':>7s} {'peak MiB':>8s} {'latest ms':>9s} {'watched':>7s} {'s ratio':>7s}"
    )
    for broker, rows in runs.items():
        for r in rows:
            print(
                f"{broker:18s} {r['journals']:6d} {r['plan']:7.2f} {r['plan_peak_mib']:8.1f}"
                f" {r['latest'] * 1000:9.0f} {r['latest_watch'] * 1000:7.0f} {r.get('stream', 0):7.2f}"
            )
    path = scalelib.save(CURVE, {"runs": runs}, load)
    draw(scalelib.load_record(CURVE))
    return 0 if path else 1


if __name__ == "__main__":
    sys.exit(main())
