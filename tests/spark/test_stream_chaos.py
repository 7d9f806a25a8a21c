"""Chaos: a streaming query journal A -> stateless transformation -> journal B, killed with
SIGKILL again and again at chosen points and restarted from its checkpoint.

A child Python process runs the query (its own local[2] Spark). The sink's test hook
(``STREAM_HOLD_ENV`` in :mod:`pyspark_gazette.testing`) touches a marker file and blocks
at one point of one micro-batch; the parent waits for the marker and kills the child's whole
process group (driver, JVM), so the kill lands exactly in that phase:

* ``task-start``: partition 0's task has not appended yet (others may have);
* ``task-end``: partition 0 has appended, Spark has not seen the task finish;
* ``commit-start``: every task finished, the sink's commit has not run;
* ``commit-end``: the sink committed, the checkpoint's commit log has not been written;
* ``checkpointed``: no hook, killed as soon as the commit log records the batch (wherever the
  next batch is by then).

Kill points come from a seeded generator (every phase once by default, in a shuffled order;
more with GAZETTE_CHAOS_KILLS); the target batch is mostly the one the restart re-runs (so
re-runs are killed too), sometimes the next. The child's JVM skips the optimising JIT: the
Spark start-ups (one per kill, one more to finish) dominate the test's time. Finally the query
runs to the end, and journal B must hold exactly the multiset
of transformed rows of A: no duplicates, no losses.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter

import pytest
from spark_helpers import fill

from pyspark_gazette.message import NDJSON
from pyspark_gazette.testing import STREAM_HOLD_ENV as HOLD_ENV

PHASES = ("task-start", "task-end", "commit-start", "commit-end", "checkpointed")
#: SIGKILLs per run (each restart is a new Spark driver, ~20-40 s): every phase once by default,
#: more with GAZETTE_CHAOS_KILLS (the phases then repeat, shuffled).
KILLS = int(os.environ.get("GAZETTE_CHAOS_KILLS", len(PHASES)))
SEED = 20261122
#: Bytes of journal A per micro-batch (``maxBytesPerTrigger``): A holds about six batches.
MAX_BYTES = 4000

CHILD = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    address, root, checkpoint = sys.argv[1:4]  # and maxBytesPerTrigger
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.driver.memory", "512m")
             .config("spark.driver.extraJavaOptions", "-XX:TieredStopAtLevel=1").getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    df = (spark.readStream.format("gazette").option("broker.address", address).option("store.fileRoot", root)
          .option("journals", "chaos/a").option("startingOffsets", "earliest")
          .option("maxBytesPerTrigger", sys.argv[4]).option("maxPartitionBytes", "2000").load()
          .selectExpr("cast(get_json_object(value, '$.id') as long) as id",
                      "upper(get_json_object(value, '$.country')) as country",
                      "offset as source_offset"))
    q = (df.writeStream.format("gazette").option("broker.address", address).option("journal", "chaos/b")
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    q.awaitTermination()
    spark.stop()
    """
)


def committed_batches(checkpoint):
    folder = checkpoint / "commits"
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.exists() else []


def run_child(script, broker, checkpoint, env, *, wait_for=None, deadline=300.0):
    """Start the query; with ``wait_for`` (a predicate), SIGKILL its process group once the
    predicate holds. Returns True if it was killed, False if the query finished first."""
    proc = subprocess.Popen(
        [sys.executable, str(script), broker.address, broker.store_root, str(checkpoint), str(MAX_BYTES)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    end = time.monotonic() + deadline
    try:
        while True:
            if wait_for is not None and wait_for():
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return True
            try:
                rc = proc.wait(timeout=0.05)
            except subprocess.TimeoutExpired:
                if time.monotonic() > end:
                    raise AssertionError("the streaming query neither reached the kill point nor finished") from None
                continue
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            assert rc == 0, err[-4000:]
            return False
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


@pytest.mark.slow
@pytest.mark.both_brokers
@pytest.mark.timeout(2400)  # each killed run starts a Spark JVM: minutes on a loaded 2-core machine
def test_sigkill_anywhere_keeps_the_sink_exactly_once(broker, client, create_journal, tmp_path):
    create_journal("chaos/a", length=1024)
    create_journal("chaos/b")
    source = fill(client, broker, "chaos/a", batches=24, per_batch=20)  # ~24 fragments, persisted
    # A batch holds at most MAX_BYTES of A, so batches 0..last exist whatever the cut.
    last = -(-len(client.read_all("chaos/a")) // MAX_BYTES) - 1
    expected = Counter()
    for offset, line in source:
        doc = json.loads(line)
        expected[(doc["id"], doc["country"].upper(), offset)] += 1
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    checkpoint = tmp_path / "ckpt"
    base_env = dict(os.environ, PYSPARK_PYTHON=sys.executable)
    base_env.pop(HOLD_ENV, None)

    rng = random.Random(SEED)
    n_kills = max(KILLS, len(PHASES))
    phases = [PHASES[i % len(PHASES)] for i in range(n_kills)]
    rng.shuffle(phases)
    kills: list[tuple[str, int]] = []
    for i, phase in enumerate(phases):
        done = committed_batches(checkpoint)
        target = (done[-1] + 1 if done else 0) + rng.choice((0, 0, 0, 1))
        # (the query ends right after the last batch's commit log: no "checkpointed" kill there)
        target = min(target, last - 1 if phase == "checkpointed" else last)
        markers = tmp_path / f"markers-{i}"
        markers.mkdir()
        env = dict(base_env)
        if phase == "checkpointed":

            def reached(target=target):
                return target in committed_batches(checkpoint)
        else:
            env[HOLD_ENV] = f"{phase}:{target}:{markers}"

            def reached(markers=markers, phase=phase, target=target):
                return (markers / f"{phase}-{target}").exists()

        assert run_child(script, broker, checkpoint, env, wait_for=reached), (phase, target, kills)
        kills.append((phase, target))
    assert {p for p, _ in kills} == set(PHASES) and len(kills) == n_kills

    assert not run_child(script, broker, checkpoint, base_env)  # to the end, undisturbed
    got = Counter()
    for _, payload in NDJSON.decode_all(client.read_all("chaos/b")):
        doc = json.loads(payload)
        got[(doc["id"], doc["country"], doc["source_offset"])] += 1
    assert got == expected
