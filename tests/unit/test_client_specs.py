from __future__ import annotations

import pytest

from pyspark_gazette.client.specs import dump_specs, load_specs
from pyspark_gazette.errors import SpecError
from pyspark_gazette.protocol import pb
from pyspark_gazette.protocol.durations import format_duration, parse_duration

TREE = """
name: examples/
replication: 1
labels:
  - {name: app.gazette.dev/tag, value: demo}
  - {name: content-type, value: application/x-ndjson}
fragment:
  length: 1048576
  compression_codec: ZSTANDARD
  stores: [file:///examples/]
  refresh_interval: 30s
  flush_interval: 10m
children:
  - name: examples/clicks
  - name: examples/raw/
    labels: [{name: content-type, value: text/plain}]
    fragment: {compression_codec: GZIP, path_postfix_template: 'date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}'}
    children:
      - name: examples/raw/lines
        revision: 7
      - name: examples/raw/old
        delete: true
"""


def test_children_inherit_and_override():
    nodes = {n.spec.name: n for n in load_specs(TREE)}
    assert set(nodes) == {"examples/clicks", "examples/raw/lines", "examples/raw/old"}
    clicks = nodes["examples/clicks"].spec
    assert clicks.fragment.compression_codec == pb.ZSTANDARD and clicks.fragment.length == 1 << 20
    assert list(clicks.fragment.stores) == ["file:///examples/"]
    assert clicks.fragment.refresh_interval.seconds == 30 and clicks.fragment.flush_interval.seconds == 600
    assert [(lb.name, lb.value) for lb in clicks.labels.labels] == [
        ("app.gazette.dev/tag", "demo"),
        ("content-type", "application/x-ndjson"),
    ]
    lines = nodes["examples/raw/lines"]
    assert lines.revision == 7 and lines.spec.fragment.compression_codec == pb.GZIP
    assert lines.spec.fragment.length == 1 << 20  # inherited through two levels
    assert ("content-type", "text/plain") in [(lb.name, lb.value) for lb in lines.spec.labels.labels]
    assert ("content-type", "application/x-ndjson") not in [(lb.name, lb.value) for lb in lines.spec.labels.labels]
    assert nodes["examples/raw/old"].delete


def test_dump_and_load_round_trip():
    nodes = load_specs(TREE)
    text = dump_specs([(n.spec, i + 1) for i, n in enumerate(nodes)])
    again = load_specs(text)
    assert [n.spec for n in again] == [n.spec for n in nodes]
    assert [n.revision for n in again] == [1, 2, 3]


@pytest.mark.parametrize(
    "doc,needle",
    [
        ("name: a/\nchildren: [{name: b/c}]", "must start with"),
        ("name: a/b\nchildren: [{name: a/b/c}]", "cannot have children"),
        ("name: a/b\nbogus: 1", "bogus"),
        ("name: a/b\nfragment: {lenght: 5}", "lenght"),
        ("name: a/b\nfragment: {compression_codec: LZ4}", "LZ4"),
        ("name: a/b\nfragment: {refresh_interval: soon}", "refresh_interval"),
        ("name: a/x\n---\nname: a/x", "twice"),
        # gazctl's own rules: children in increasing name order, a node's labels sorted and unique.
        ("name: a/\nchildren: [{name: a/x}, {name: a/x}]", "ordered by name"),
        ("name: a/\nchildren: [{name: a/y}, {name: a/x}]", "'a/x' comes after 'a/y'"),
        ("name: a/b\nlabels: [{name: z, value: '1'}, {name: a, value: '1'}]", "labels must be sorted"),
        ("name: a/b\nlabels: [{name: a, value: '2'}, {name: a, value: '1'}]", "a='1' comes after a='2'"),
        ("[1, 2", "does not parse"),
    ],
)
def test_bad_documents_name_the_problem(doc, needle):
    with pytest.raises(SpecError) as ei:
        load_specs(doc)
    assert needle in str(ei.value)


@pytest.mark.parametrize("text,seconds", [("1m30s", 90), ("24h", 86400), ("500ms", 0.5), ("1h0m0s", 3600), (45, 45)])
def test_durations(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)


def test_a_mapping_template_may_list_labels_in_any_order():
    """``createJournals`` templates are mappings, not gazctl files: label order is free there."""
    from pyspark_gazette.client.specs import spec_from_mapping

    spec = spec_from_mapping("t/x", {"labels": [{"name": "z", "value": "1"}, {"name": "a", "value": "2"}]})
    assert [(lb.name, lb.value) for lb in spec.labels.labels] == [("a", "2"), ("z", "1")]
