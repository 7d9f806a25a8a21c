"""``pyspark-gazette quickstart``: the real job in a child process (its own local[2] Spark and
embedded broker), then its journals checked independently of Spark and of its own report.

After the job exits, a fresh embedded broker is opened on the job's data directory (journals and
fragments are recovered from disk) and the journals are read with the client: the click journal
must hold exactly the ids the job generated, the checkout journal exactly one row per checkout
click, and the report's numbers must agree with those bytes.
"""

from __future__ import annotations

import collections
import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

from pyspark_gazette.message import NDJSON

ROOT = pathlib.Path(__file__).resolve().parents[2]
ROWS = 20_000


def quickstart(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k != "PYSPARK_PYTHON"}  # the CLI sets it itself
    return subprocess.run(
        [sys.executable, "-m", "pyspark_gazette.cli", "quickstart", *args],
        cwd=ROOT,
        env={**base, **(env or {})},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


def report_value(text: str, label: str) -> str:
    m = re.search(rf"^  {re.escape(label)}\s+: (.+)$", text, re.M)
    assert m, f"no {label!r} in the report:\n{text}"
    return m.group(1)


def numbers(text: str) -> list[int]:
    return [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", text)]


def journal_rows(data_dir: pathlib.Path) -> tuple[list[dict], list[dict], int]:
    """Rows of the click and checkout journals, and the click journal's size, from a new broker."""
    from pyspark_gazette.broker import EmbeddedBroker
    from pyspark_gazette.client import ClientConfig, JournalClient

    store = str(data_dir / "store")
    with (
        EmbeddedBroker(str(data_dir / "broker"), file_root=store) as broker,
        JournalClient(ClientConfig(broker.address, file_root=store)) as client,
    ):
        names = {i.name for i in client.list_journals()}
        assert names == {"quickstart/clicks", "quickstart/checkouts"}
        clicks = client.read_all("quickstart/clicks")
        checkouts = client.read_all("quickstart/checkouts")
    decode = lambda data: [json.loads(p) for _, p in NDJSON.decode_all(data)]  # noqa: E731
    return decode(clicks), decode(checkouts), len(clicks)


@pytest.fixture(scope="module")
def first_run(tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("quickstart") / "qs"
    out = quickstart("--rows", str(ROWS), "--data-dir", str(data_dir))
    assert out.returncode == 0, out.stdout + out.stderr
    return data_dir, out.stdout, out.stderr


def test_quickstart_writes_reads_and_streams_exactly_once(first_run):
    data_dir, text, _ = first_run
    clicks, checkouts, size = journal_rows(data_dir)

    # The clicks journal holds every generated event once.
    assert sorted(c["event_id"] for c in clicks) == list(range(ROWS))
    assert {c["page"] for c in clicks} >= {"/", "/checkout"} and len({c["country"] for c in clicks}) == 10

    # The checkouts journal holds each checkout click once, enriched from that very click.
    by_id = {c["event_id"]: c for c in clicks}
    expected = sorted(c["event_id"] for c in clicks if c["page"] == "/checkout")
    assert sorted(r["event_id"] for r in checkouts) == expected and expected
    for row in checkouts:
        click = by_id[row["event_id"]]
        assert (row["user_id"], row["country"], row["device"]) == (click["user_id"], click["country"], click["device"])
        assert row["duration_s"] == round(click["duration_ms"] / 1000, 3)
        assert row["slow"] == (click["duration_ms"] >= 3000)

    # The report agrees with the journals.
    assert numbers(report_value(text, "rows written (df.write)"))[:2] == [ROWS, size]
    direct_fragments, direct_bytes = numbers(report_value(text, "aggregation read directly from files"))
    broker_fragments, broker_ranges, broker_bytes = numbers(report_value(text, "aggregation read through the broker"))
    assert direct_bytes + broker_bytes == size
    # The fragments line and the read agree: every fragment this run wrote was read once, from
    # its file when persisted, through the broker while in the spool.
    written, persisted, spooled = numbers(report_value(text, "quickstart/clicks fragments written"))
    assert (direct_fragments, broker_fragments) == (persisted, spooled)
    assert persisted + spooled == written
    assert (broker_ranges > 0) == (spooled > 0)
    assert direct_fragments >= 1 and direct_bytes > 0  # persisted fragments were read from the files
    assert numbers(report_value(text, "rows in quickstart/checkouts"))[0] == len(checkouts)
    assert numbers(report_value(text, "stream run 1"))[1] == ROWS
    assert numbers(report_value(text, "stream run 2 (same checkpoint)"))[1] == 0

    # The printed aggregation is the one of the data in the journal.
    counts = collections.Counter(c["country"] for c in clicks)
    for country, n in counts.items():
        assert re.search(rf"^    {country}\s+{n:,}\s", text, re.M), (country, n, text)
    # Each long step said what it did, in order.
    assert [int(m) for m in re.findall(r"^\[(\d)/7\]", text, re.M)] == list(range(1, 8))


def test_the_report_agrees_with_itself(first_run):
    """What the steps printed and the report's lines state the same numbers (issue 25: step 4
    said "1 of 2 fragments persisted" and step 5 "read 2 fragment files directly"; "8/8 tasks"
    beside "Spark partitions: 6"; "1 micro-batches")."""
    _, text, stderr = first_run
    written, persisted, spooled = numbers(report_value(text, "quickstart/clicks fragments written"))
    step4 = re.search(
        r"^      (\d+) of (\d+) fragments? persisted(?:; (\d+) still in the broker's spool)?$", text, re.M
    )
    assert step4, text
    assert (int(step4[1]), int(step4[2]), int(step4[3] or 0)) == (persisted, written, spooled)
    partitions = int(report_value(text, "aggregation read tasks (Spark partitions)"))
    direct_fragments = numbers(report_value(text, "aggregation read directly from files"))[0]
    broker_ranges = numbers(report_value(text, "aggregation read through the broker"))[1]
    step5 = re.search(
        r"^      \d+ countries; .*?(\d+) read tasks? \(Spark partitions\): (\d+) fragment files? read directly, (\d+) ranges? through",
        text,
        re.M,
    )
    assert step5 and [int(g) for g in step5.groups()] == [partitions, direct_fragments, broker_ranges], text
    # The aggregation's progress counts every stage; its first stage is the read, one task per partition.
    progress = re.search(r"^      aggregating: (\d+)/(\d+) tasks(?: \(stages of ([\d + ]+)\))?$", text, re.M)
    assert progress, text
    stages = [int(n) for n in (progress[3] or progress[2]).split(" + ")]
    assert stages[0] == partitions and sum(stages) == int(progress[2]) == int(progress[1])
    # Counts and nouns agree ("1 micro-batch", "2 micro-batches", "2 fragment files").
    nouns = re.finditer(
        r"(?<![\w:.,/])(\d+(?:,\d{3})*) (micro-batch(?:es)?|fragments?(?! files?)|fragment files?|ranges?|read tasks?)\b",
        text,
    )
    for m in nouns:
        assert (m[1] == "1") == (not m[2].endswith("s")), m[0]
    # gRPC's fork handlers stay quiet with the broker in this process.
    assert "fork_posix" not in stderr and "skipping fork() handlers" not in stderr, stderr


def test_keep_continues_the_ids_and_the_stream(first_run):
    data_dir, _, _ = first_run
    out = quickstart("--rows", "5000", "--data-dir", str(data_dir), "--keep")
    assert out.returncode == 0, out.stdout + out.stderr
    assert numbers(report_value(out.stdout, "rows written (df.write)"))[2] == ROWS  # ids continue
    assert numbers(report_value(out.stdout, "stream run 1"))[1] == 5000  # resumed from the checkpoint
    clicks, checkouts, _ = journal_rows(data_dir)
    assert sorted(c["event_id"] for c in clicks) == list(range(ROWS + 5000))
    assert sorted(r["event_id"] for r in checkouts) == sorted(c["event_id"] for c in clicks if c["page"] == "/checkout")


def test_a_bad_option_in_the_options_file_fails_the_write_naming_it(tmp_path):
    conf = tmp_path / "gazette.properties"
    conf.write_text("# bad\nmaxBatchBytes=lots\n")
    out = quickstart("--rows", "1000", "--data-dir", str(tmp_path / "qs"), env={"PYSPARK_GAZETTE_CONF": str(conf)})
    assert out.returncode == 1, out.stdout + out.stderr
    error = [ln for ln in out.stderr.splitlines() if ln.startswith("error:")]
    assert error, out.stderr
    assert "[3/7] write" in error[0] and "maxBatchBytes" in error[0] and f"{conf}, line 2" in error[0]
    assert "report" not in out.stdout


def test_a_data_directory_that_is_a_file_fails_before_starting(tmp_path):
    blocker = tmp_path / "qs"
    blocker.write_text("not a directory")
    out = quickstart("--data-dir", str(blocker))
    assert out.returncode == 1 and out.stderr.startswith("error: setup failed") and "not a directory" in out.stderr
    assert blocker.read_text() == "not a directory"


def test_rows_must_be_positive(tmp_path):
    out = quickstart("--rows", "0", "--data-dir", str(tmp_path / "qs"))
    assert out.returncode == 2 and "--rows must be positive" in out.stderr


def test_a_directory_with_other_files_is_not_wiped(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    out = quickstart("--data-dir", str(tmp_path))
    assert out.returncode == 1 and "refusing to wipe" in out.stderr and "notes.txt" in out.stderr
    assert (tmp_path / "notes.txt").read_text() == "mine"
