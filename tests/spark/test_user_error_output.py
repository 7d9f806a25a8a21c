"""What a user's script prints when the connector fails, run as a user runs it (``python
script.py``, a local[2] session of its own, an embedded broker), once with Spark's defaults and
once with ``spark.sql.execution.pyspark.udf.hideTraceback.enabled``: a planning error (a Kafka
option) and a task error (a message FAILFAST refuses).

Asserted on the structure of stderr, not on counts of Spark's own lines: our sentence ends the
error (before Spark's ``SQLSTATE`` line); the only frame of ours is the re-raise of
``spark/surface.py``; with hideTraceback there is none and our sentence is on the error's first
line; and no line of ours is printed besides the ones Spark carries (nothing of our loggers
repeats the error). docs/troubleshooting.md has the line counts.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

SCRIPT = r"""
import os, sys, tempfile, traceback
from pyspark_gazette.broker import EmbeddedBroker
from pyspark.sql import SparkSession

spec = ('{"labels": [{"name": "content-type", "value": "application/x-ndjson"}], '
        '"fragment": {"length": 1048576, "compression_codec": "NONE", "stores": ["file:///s/"]}}')
d = tempfile.mkdtemp(dir=sys.argv[1])
with EmbeddedBroker(d + "/data", file_root=d + "/store") as broker:
    builder = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
    for kv in sys.argv[2:]:
        builder = builder.config(*kv.split("=", 1))
    spark = builder.getOrCreate()
    gz = {"broker.address": broker.address}
    spark.createDataFrame([("not json",)], "value STRING").write.format("gazette").options(**gz).option(
        "journal", "errors/clicks").option("createJournals", spec).mode("append").save()
    actions = {
        "planning": lambda: spark.read.format("gazette").options(**gz).option("subscribe", "clicks").load(
            "errors/clicks").collect(),
        "task": lambda: spark.read.format("gazette").options(**gz).option("mode", "FAILFAST").schema(
            "n LONG").load("errors/clicks").collect(),
    }
    for name, action in actions.items():
        print(f"=== {name}", file=sys.stderr, flush=True)
        try:
            action()
        except Exception:
            traceback.print_exc()  # what an uncaught error prints
            sys.stderr.flush()
    print("=== end", file=sys.stderr, flush=True)
    spark.stop()
"""

PLANNING = "pyspark_gazette.errors.OptionError: option 'subscribe': is an option of Spark's Kafka source; "
TASK = (
    "pyspark_gazette.errors.MessageDecodeError: journal 'errors/clicks', message at offset 0: "
    "malformed JSON record at index 0 (mode FAILFAST)"
)
#: Spark's prefixes of the error's first line (driver, and the task's error as Spark logs it).
PLANNING_PREFIX = (
    "pyspark.errors.exceptions.captured.AnalysisException: [PYTHON_DATA_SOURCE_ERROR] "
    "Failed to create Python data source instance: "
)
HIDE = "spark.sql.execution.pyspark.udf.hideTraceback.enabled=true"


def run_script(tmp_path, *confs: str) -> dict[str, list[str]]:
    """The script's stderr lines, by section (``planning``, ``task``)."""
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp_path), *confs],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the script and its Spark JVM, by the group we made
            proc.wait()
    assert proc.returncode == 0, err
    assert "=== end" in err, err
    sections = {}
    for part in err.split("=== ")[1:]:
        name, _, body = part.partition("\n")
        sections[name] = [line for line in body.splitlines() if line.strip()]
    return sections


def without_sqlstate(lines: list[str]) -> list[str]:
    return lines[:-1] if lines and re.fullmatch(r"\s*SQLSTATE: \w+\s*", lines[-1]) else lines


def our_frames(lines: list[str]) -> list[str]:
    return [line for line in lines if re.match(r'\s*File ".*pyspark_gazette/', line)]


def test_with_sparks_defaults_our_sentence_ends_each_error_after_one_frame_of_ours(tmp_path):
    out = run_script(tmp_path)
    for name, sentence in (("planning", PLANNING), ("task", TASK)):
        lines = out[name]
        assert without_sqlstate(lines)[-1].startswith(sentence), "\n".join(lines)
        frames = our_frames(lines)
        assert frames and all("pyspark_gazette/spark/surface.py" in f for f in frames), "\n".join(lines)
        # Every line with our sentence is one Spark carries: the class name leads it, or Spark's
        # prefix does (its task error log); none is printed by a logger of ours.
        ours = [line for line in lines if sentence.split(": ", 1)[1][:40] in line]
        for line in ours:
            assert line.startswith(sentence) or "An exception was thrown from the Python worker" in line, line
    # In the worker's text that frame is the re-raise on one line, without a line of carets under it.
    lines = out["planning"]
    header = next(i for i, line in enumerate(lines) if line.startswith(PLANNING_PREFIX))
    at = [i for i in range(header, len(lines)) if lines[i].strip() == "raise error.with_traceback(None) from None"]
    assert len(at) == 1 and not lines[at[0] + 1].strip().startswith("^"), "\n".join(lines)


def test_with_hide_traceback_our_sentence_is_on_the_errors_first_line(tmp_path):
    out = run_script(tmp_path, HIDE)
    planning = out["planning"]
    assert not our_frames(planning), "\n".join(planning)
    first = [line for line in planning if line.startswith("pyspark.errors.exceptions.captured.")]
    assert len(first) == 1 and first[0].startswith(PLANNING_PREFIX + PLANNING), "\n".join(planning)
    task = out["task"]
    assert not our_frames(task), "\n".join(task)
    assert without_sqlstate(task)[-1].startswith(TASK), "\n".join(task)
    header = next(i for i, line in enumerate(task) if line.startswith("pyspark.errors.exceptions.captured."))
    # Spark's one-line preface of a task's Python error, then ours.
    assert (
        task[header]
        == "pyspark.errors.exceptions.captured.PythonException: An exception was thrown from the Python worker:"
    )
    assert task[header + 1].startswith(TASK), "\n".join(task)


@pytest.fixture(autouse=True)
def _no_stray_spark_env(monkeypatch):
    """The script starts a session of its own: no test session's settings leak into it."""
    for key in list(os.environ):
        if key.startswith(("PYSPARK_GAZETTE_", "SPARK_CONF")):
            monkeypatch.delenv(key, raising=False)
