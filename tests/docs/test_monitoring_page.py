"""docs/monitoring.md's lag code, run as written on both shapes of a stream's offsets: byte
offsets, and read-committed offsets (``{"offset": ..., "producers": ...}``, as
``spark/read/stream.py`` writes them), in the progress report's JSON text and as parsed objects."""

from __future__ import annotations

import json
import pathlib
import re
import types

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "monitoring.md"

PRODUCERS = {"6d1a0c3b9e21": {"last_ack": 277634218459217936, "begin": -1}}
PLAIN = ({"a/clicks": 100, "a/views": 40}, {"a/clicks": 250, "a/views": 40})
COMMITTED = (
    {"a/clicks": {"offset": 100, "producers": PRODUCERS}, "a/views": {"offset": 40, "producers": {}}},
    {"a/clicks": 250, "a/views": 40},
)


def page_code(section: str) -> str:
    text = PAGE.read_text(encoding="utf-8")
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```python\n(.*?)```", body, flags=re.S)
    assert len(blocks) == 1, f"docs/monitoring.md, {section}: expected one python block"
    return blocks[0]


def source(end: dict, latest: dict, as_text: bool) -> dict:
    encode = json.dumps if as_text else (lambda o: o)
    return {"description": "gazette", "endOffset": encode(end), "latestOffset": encode(latest)}


@pytest.mark.unit
@pytest.mark.parametrize("as_text", [True, False], ids=["json-text", "parsed"])
@pytest.mark.parametrize("offsets", [PLAIN, COMMITTED], ids=["byte-offsets", "read-committed"])
def test_the_progress_snippet_computes_the_lag_of_both_offset_shapes(offsets, as_text):
    end, latest = offsets
    query = types.SimpleNamespace(lastProgress={"sources": [source(end, latest, as_text)]})
    scope = {"query": query}
    exec(page_code("From the query's progress"), scope)
    assert scope["lag"] == {"a/clicks": 150, "a/views": 0}


@pytest.mark.unit
@pytest.mark.parametrize("offsets", [PLAIN, COMMITTED], ids=["byte-offsets", "read-committed"])
def test_the_listener_reports_the_lag_of_both_offset_shapes(offsets, capsys):
    """The listener block, after the progress block (it uses its ``lag_of``), fed a progress event
    as Spark's listener bus delivers it (offsets as JSON text)."""
    from pyspark.sql.streaming.listener import SourceProgress

    listeners = []
    spark = types.SimpleNamespace(streams=types.SimpleNamespace(addListener=listeners.append))
    scope = {"query": types.SimpleNamespace(lastProgress={"sources": [source(*PLAIN, as_text=True)]}), "spark": spark}
    exec(page_code("From the query's progress"), scope)
    exec(page_code("A listener"), scope)
    (listener,) = listeners
    end, latest = offsets
    raw = {**source(end, latest, as_text=True), "startOffset": json.dumps(end), "numInputRows": 3}
    raw.update(inputRowsPerSecond=1.0, processedRowsPerSecond=1.0, metrics={})
    progress = types.SimpleNamespace(name="clicks", batchId=7, sources=[SourceProgress.fromJson(raw)])
    listener.onQueryProgress(types.SimpleNamespace(progress=progress))
    assert capsys.readouterr().out == "clicks 7 {'a/clicks': 150, 'a/views': 0}\n"
