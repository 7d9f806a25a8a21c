"""Our transactional writes, read committed by Gazette's own ReadCommittedIter (the Go peer).

Our sequencer accepting our UUIDs and ACKs proves little on its own; here Gazette's code is
the reader. Rows go to two journals per write (one transaction spans both), and in the retry
test the first attempt of a task fails after appending, so its rows are in the journals but
must never commit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import peer
import pytest

from pyspark_gazette.message import NDJSON
from pyspark_gazette.spark.write.task import FAIL_ENV

ACK_TXN = 0x2
JOURNALS = ["oracle/txn/a", "oracle/txn/b"]


def committed_rows(address: str, journals: list[str] = JOURNALS) -> list[tuple[str, int]]:
    """(journal, id) of every committed row, per Gazette; ACKs left out."""
    out = []
    for line in peer.read_committed(address, journals):
        if line["flags"] & ACK_TXN:
            assert set(line["doc"]) == {"_meta"}, line  # an ACK carries nothing else
            continue
        assert line["flags"] == 0x1, line  # written as CONTINUE_TXN, committed by an ACK
        out.append((line["journal"], line["doc"]["id"]))
    return sorted(out)


def expected(n: int, journals: list[str] = JOURNALS) -> list[tuple[str, int]]:
    return sorted((journals[i % 2], i) for i in range(n))


def test_transactional_writes_are_read_committed_by_gazette(spark, target):
    journals = [f"{j}-{target.kind}" for j in JOURNALS]
    for j in journals:
        target.create(j)
    df = spark.range(0, 600, 1, 3).selectExpr(
        f"if(id % 2 = 0, '{journals[0]}', '{journals[1]}') as journal", "id", "cast(id * 3 as string) as s"
    )
    df.write.format("gazette").mode("append").option("broker.address", target.address).option(
        "transactional", "true"
    ).save()
    assert committed_rows(target.address, journals) == expected(600, journals)


RETRY_SCRIPT = textwrap.dedent(
    """
    import sys
    from pyspark.sql import SparkSession
    address, a, b = sys.argv[1:4]
    spark = (SparkSession.builder.master("local[2,4]").config("spark.ui.enabled", "false")
             .config("spark.sql.execution.arrow.maxRecordsPerBatch", "100").getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    df = spark.range(0, 1000, 1, 2).selectExpr(f"if(id % 2 = 0, '{a}', '{b}') as journal", "id")
    (df.write.format("gazette").mode("append").option("broker.address", address)
       .option("transactional", "true").save())
    spark.stop()
    """
)


@pytest.mark.slow
def test_a_retried_write_task_is_read_once_by_gazette(broker, client, create_journal, tmp_path):
    """The first attempt of partition 0 fails after appending 300 rows; Spark retries it."""
    for j in JOURNALS:
        create_journal(j)
    script = tmp_path / "retry.py"
    script.write_text(RETRY_SCRIPT)
    env = dict(os.environ, **{FAIL_ENV: "300", "PYSPARK_PYTHON": sys.executable})
    proc = subprocess.run(
        [sys.executable, str(script), broker.address, *JOURNALS], env=env, timeout=300, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # The failed attempt's rows were appended, but Gazette never reads them as committed.
    docs = [json.loads(p) for j in JOURNALS for _, p in NDJSON.decode_all(client.read_all(j))]
    ids = [d["id"] for d in docs if "id" in d]
    assert len(ids) >= 1300 and set(ids) == set(range(1000))
    assert committed_rows(broker.address) == expected(1000)
