"""Monitoring a stream, as docs/monitoring.md shows: lag from the query's progress (a listener
using the page's own ``lag_of``) and from the command line (``journals lag --checkpoint``), for
plain and read-committed streams (whose offsets are ``{"offset": ..., "producers": ...}``)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys
import threading

import pytest
from pyspark.sql.streaming import StreamingQueryListener

JOURNAL = "monitor/clicks"
PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "monitoring.md"


def _page_lag_of():
    """``lag_of`` as docs/monitoring.md defines it (its first python block)."""
    scope: dict = {
        "query": type("Query", (), {"lastProgress": {"sources": [{"endOffset": "{}", "latestOffset": "{}"}]}})
    }
    exec(re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), flags=re.S)[0], scope)
    return scope["lag_of"]


lag_of = _page_lag_of()


class LagListener(StreamingQueryListener):
    """docs/monitoring.md's listener: the backlog in bytes per journal after each batch."""

    def __init__(self):
        self.lags: list[dict[str, int]] = []
        self.ends: list[dict] = []  # each batch's endOffset, parsed
        self.terminated = threading.Event()  # (for the test) events arrive in order, this one last

    def onQueryStarted(self, event):  # noqa: N802
        pass

    def onQueryProgress(self, event):  # noqa: N802
        for source in event.progress.sources:
            if source.latestOffset and source.endOffset:
                self.lags.append(lag_of(source))
                self.ends.append(json.loads(source.endOffset))

    def onQueryIdle(self, event):  # noqa: N802
        pass

    def onQueryTerminated(self, event):  # noqa: N802
        self.terminated.set()


def run_available_now(spark, broker, checkpoint, read_committed: bool) -> None:
    query = (
        spark.readStream.format("gazette")
        .option("broker.address", broker.address)
        .option("readCommitted", str(read_committed).lower())
        .option("startingOffsets", "earliest")
        .option("maxBytesPerTrigger", "1k")
        .load(JOURNAL)
        .writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    try:
        assert query.awaitTermination(300)
        assert query.exception() is None
    finally:
        query.stop()


def lag_cli(broker, checkpoint) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BROKER_", "PYSPARK_GAZETTE_"))}
    return subprocess.run(
        [sys.executable, "-m", "pyspark_gazette.cli", "journals", "lag", "--checkpoint", checkpoint]
        + ["--broker.address", broker.address],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("read_committed", [False, True], ids=["plain", "read-committed"])
def test_lag_from_progress_and_from_the_command_line(spark, broker, client, create_journal, tmp_path, read_committed):
    create_journal(JOURNAL)
    first = b"".join(b'{"n": %d, "pad": "xxxxxxxxxxxxxxxxxxxxxxxx"}\n' % i for i in range(100))
    client.append(JOURNAL, first)
    checkpoint = str(tmp_path / "chk")

    listener = LagListener()
    spark.streams.addListener(listener)
    try:
        run_available_now(spark, broker, checkpoint, read_committed)
        assert listener.terminated.wait(120), "the listener never heard of the query's end"
    finally:
        spark.streams.removeListener(listener)
    # 1 KiB per batch over several KiB: the backlog shrinks to nothing.
    backlog = [lag[JOURNAL] for lag in listener.lags]
    assert len(backlog) >= 2 and backlog[0] > 0 and backlog[-1] == 0
    assert backlog == sorted(backlog, reverse=True)
    # The offsets are objects: the byte offset, the journal's creation revision (both brokers
    # report one) and, with readCommitted, the producers' states.
    shapes = {tuple(sorted(end[JOURNAL])) for end in listener.ends}
    assert shapes == {("created", "offset", "producers") if read_committed else ("created", "offset")}, listener.ends

    out = lag_cli(broker, checkpoint)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[2].split() == [JOURNAL, str(len(first)), str(len(first)), "0"]

    more = b'{"n": 100}\n' * 10
    client.append(JOURNAL, more)
    out = lag_cli(broker, checkpoint)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[2].split() == [JOURNAL, str(len(first)), str(len(first) + len(more)), str(len(more))]


def test_lag_of_a_directory_that_is_no_checkpoint_is_one_line(broker, tmp_path):
    out = lag_cli(broker, str(tmp_path))
    assert out.returncode == 1 and out.stderr.count("\n") == 1
    assert out.stderr.startswith(f"error: --checkpoint {tmp_path}: ") and "not a streaming checkpoint" in out.stderr
