"""What ``commitWhen=persisted`` costs per micro-batch of the streaming sink, against the default
(``acknowledged``), in the same run, on the embedded broker with a file store.

A file stream (one input file of ``--rows`` JSON rows per micro-batch) is written to a journal;
each micro-batch is timed from the input file's appearance to ``processAllAvailable()``
returning (the batch committed). Three journals:

* ``acknowledged``: the default; the commit does not wait for the store;
* ``persisted, small fragments``: ``fragment.length`` below a micro-batch's bytes, so the
  zero-byte append of the commit's wait rolls the spool and the broker persists it at once;
* ``persisted, flush boundary``: ``fragment.length`` above a micro-batch's bytes, so the spool
  is rolled only at the next ``flush_interval`` boundary (``--flush`` seconds; Gazette's
  minimum is 60): the commit waits for it.

Each journal has ``flush_interval`` ``--flush`` (the mode requires one). The first two queries
run side by side, their micro-batches interleaved (one warm-up batch each, not timed); the third
after them. Printed: the median seconds per micro-batch of each and its ratio to
``acknowledged``.

    .venv/bin/python bench/bench_persisted_commit.py [--rows 2000] [--batches 5] [--boundary-batches 2] [--flush 60]
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from benchlib import local_spark, make_spec  # noqa: E402


class Stream:
    """One sink query fed one input file per micro-batch."""

    def __init__(self, spark, broker, root: pathlib.Path, name: str, journal: str, rows: int, options: dict):
        self.folder, checkpoint = root / f"in-{name}", root / f"ck-{name}"
        self.folder.mkdir()
        self.rows, self.batch = rows, 0
        df = spark.readStream.schema("id long, name string").option("maxFilesPerTrigger", 1).json(str(self.folder))
        w = df.writeStream.format("gazette").option("broker.address", broker.address).option("journal", journal)
        w = w.option("checkpointLocation", str(checkpoint))
        for k, v in options.items():
            w = w.option(k, v)
        self.query = w.start()

    def one(self) -> float:
        """Seconds from a new input file to its micro-batch committed."""
        b, rows = self.batch, self.rows
        self.batch += 1
        data = "".join(json.dumps({"id": b * rows + i, "name": f"name-{b}-{i:08d}"}) + "\n" for i in range(rows))
        tmp = self.folder / f".in-{b:04d}.tmp"
        tmp.write_text(data)
        started = time.monotonic()
        tmp.rename(self.folder / f"in-{b:04d}.json")
        self.query.processAllAvailable()
        return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=2000, help="rows per micro-batch (about 45 bytes each)")
    parser.add_argument("--batches", type=int, default=5, help="timed micro-batches of the first two journals")
    parser.add_argument("--boundary-batches", type=int, default=2, help="timed micro-batches of the third")
    parser.add_argument("--flush", type=int, default=60, help="flush_interval seconds (Gazette: 0 or >= 60)")
    args = parser.parse_args()

    from pyspark_gazette.broker import EmbeddedBroker
    from pyspark_gazette.client import Change, JournalClient

    root = pathlib.Path(tempfile.mkdtemp(prefix="bench-persisted-"))
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # workers with this checkout's package
    # Spark (a forked JVM) before the in-process broker's gRPC threads exist.
    spark = local_spark("local[2]", **{"spark.sql.shuffle.partitions": 2})
    small, large = 1024, 1 << 30
    cases = [
        ("acknowledged", small, {}),
        ("persisted, small fragments", small, {"commitWhen": "persisted"}),
        ("persisted, flush boundary", large, {"commitWhen": "persisted"}),
    ]
    try:
        with EmbeddedBroker(str(root / "broker"), file_root=str(root / "store")) as broker:
            with JournalClient(broker.address) as client:
                for i, (_name, length, _) in enumerate(cases):
                    spec = make_spec(f"bench/persisted-{i}", length=length, flush_seconds=args.flush)
                    client.apply([Change(expect_mod_revision=0, upsert=spec)])
            streams = [
                Stream(spark, broker, root, str(i), f"bench/persisted-{i}", args.rows, options)
                for i, (_, _, options) in enumerate(cases)
            ]
            results: dict[str, list[float]] = {name: [] for name, _, _ in cases}
            try:
                for s in streams[:2]:
                    s.one()  # warm-up, not timed
                for _ in range(args.batches):  # the first two interleaved, batch by batch
                    for (name, _, _), s in zip(cases[:2], streams[:2], strict=True):
                        results[name].append(s.one())
                streams[2].one()
                for _ in range(args.boundary_batches):
                    results[cases[2][0]].append(streams[2].one())
            finally:
                for s in streams:
                    s.query.stop()
        base = statistics.median(results["acknowledged"])
        print(f"rows per micro-batch {args.rows}, flush_interval {args.flush}s, fragment.length {small} / {large}")
        for name, times in results.items():
            med = statistics.median(times)
            print(
                f"{name:28s} median {med:7.2f} s/batch  (min {min(times):.2f}, max {max(times):.2f}, "
                f"n={len(times)})  persisted/acknowledged {med / base:6.2f}"
            )
    finally:
        spark.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
