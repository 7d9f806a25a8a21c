"""docs/getting-started.md's "Read with Spark" and "Write with Spark" examples, run as written on
the session of the tests (the page's `SparkSession.builder...getOrCreate()` returns it) against an
embedded broker holding quickstart-like clicks and one message the schema does not fit: each
block runs, the corrupt-record example shows that message and only it, and the write creates its
journal from the page's `createJournals` spec.

The only edits to the page's text: the broker's address replaces ``http://127.0.0.1:8080`` and
the broker's store replaces ``/tmp/gazette-store``; ``.show()`` prints to the captured output.
"""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "getting-started.md"


def section_blocks(title: str) -> list[str]:
    text = PAGE.read_text(encoding="utf-8")
    section = text.split(f"## {title}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, flags=re.S)


def test_the_read_examples_run_and_show_what_the_schema_does_not_fit(spark, broker, client, create_journal, capsys):
    create_journal("quickstart/clicks")
    good = b'{"event_id": 1, "country": "DE"}\n{"event_id": 2, "country": "FR"}\n'
    bad = b'{"event_id": "three", "country": "IT"}\n'
    client.append("quickstart/clicks", good + bad)

    blocks = section_blocks("Read with Spark")
    assert len(blocks) >= 3, "the page's layout changed: update this test"
    names: dict = {}
    for block in blocks:
        code = block.replace("http://127.0.0.1:8080", broker.address).replace("/tmp/gazette-store", broker.store_root)
        exec(compile(code, str(PAGE), "exec"), names)  # noqa: S102 - the page's own example

    assert sorted(r.value for r in names["df"].collect()) == sorted(line.decode() for line in (good + bad).splitlines())
    checked = names["checked"]
    rows = sorted(checked.collect(), key=lambda r: (r.event_id is not None, r.event_id or 0))
    # PERMISSIVE, as spark.read.json: the field that does not fit is null, the others are read,
    # and the message's text is in _corrupt_record.
    assert [r.asDict() for r in rows] == [
        {"event_id": None, "country": "IT", "_corrupt_record": bad.decode().rstrip("\n")},
        {"event_id": 1, "country": "DE", "_corrupt_record": None},
        {"event_id": 2, "country": "FR", "_corrupt_record": None},
    ]
    shown = capsys.readouterr().out
    assert bad.decode().rstrip("\n") in shown  # the page's .show() of the corrupt records

    # The write example: the counts per country go to a journal createJournals makes.
    (write,) = section_blocks("Write with Spark")
    exec(compile(write.replace("http://127.0.0.1:8080", broker.address), str(PAGE), "exec"), names)  # noqa: S102
    written = sorted(client.read_all("examples/clicks-by-country").decode().splitlines())
    assert written == ['{"country":"DE","count":1}', '{"country":"FR","count":1}', '{"country":"IT","count":1}']
