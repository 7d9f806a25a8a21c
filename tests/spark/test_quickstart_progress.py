"""The quickstart's task progress (issue 15): one final count when stdout is not a terminal (a
log or a pipe gets no stream of repeated lines), a line updated in place on a terminal."""

from __future__ import annotations

import io
import re

from pyspark_gazette.quickstart.spark_job import job_progress


def test_not_a_terminal_prints_the_final_count_once(spark):
    said, out = [], io.StringIO()
    with job_progress(spark, "counting", said.append, every=0.01, terminal=False, out=out):
        assert spark.range(0, 1000, numPartitions=4).count() == 1000
    assert len(said) == 1 and said[0].startswith("      counting: ")
    done, total = said[0].split(": ")[1].split()[0].split("/")
    assert done == total and int(total) >= 4  # the 4 partitions, and the count's final stage
    assert out.getvalue() == ""


def test_a_terminal_gets_the_count_updated_in_place(spark):
    said, out = [], io.StringIO()
    with job_progress(spark, "summing", said.append, every=0.01, terminal=True, out=out):
        assert spark.range(0, 1000, numPartitions=3).selectExpr("sum(id)").first()[0] == 499500
    # A job of several stages counts them all and says how they add up.
    assert said and re.fullmatch(r"      summing: (\d+)/\1 tasks(?: \(stages of \d+(?: \+ \d+)+\))?", said[-1]), said
    done, total = said[-1].split(": ")[1].split()[0].split("/")
    assert done == total and int(total) >= 3
    assert "\n" not in out.getvalue() and out.getvalue().endswith("\r")


def test_a_failed_block_prints_no_count_and_leaves_no_job_group(spark):
    said = []
    try:
        with job_progress(spark, "failing", said.append, terminal=False, out=io.StringIO()):
            spark.range(10).count()
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert said == []
    assert spark.sparkContext.getLocalProperty("spark.jobGroup.id") is None
