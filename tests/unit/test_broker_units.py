"""Unit tests of the broker's pure parts: postfix templates, cover sets, spool recovery."""

from __future__ import annotations

import hashlib
import os
from datetime import datetime, timezone

import pytest

from pyspark_gazette.broker.fragment import postfix
from pyspark_gazette.broker.fragment.index import FragmentIndex, cover_set
from pyspark_gazette.broker.fragment.spool import Spool
from pyspark_gazette.broker.journal import apply_registers
from pyspark_gazette.fragments import FragmentRef
from pyspark_gazette.protocol import label_set, pb

T = datetime(2019, 11, 19, 22, 5, 9, tzinfo=timezone.utc)
VALUES = postfix.SpoolValues(journal="a/b", begin=16, end=32, first_append_time=T)


@pytest.mark.parametrize(
    "template, expected",
    [
        ("", ""),
        (
            'date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}/hour={{ .Spool.FirstAppendTime.Format "15" }}',
            "date=2019-11-19/hour=22",
        ),
        ('{{.Spool.FirstAppendTime.Format "20060102T150405"}}', "20191119T220509"),
        ('{{ .Spool.FirstAppendTime.Format "Jan 2 06 03PM" }}', "Nov 19 19 10PM"),
        ("b={{ .Spool.Begin }}/e={{ .Spool.End }}/{{ .Name }}", "b=16/e=32/a/b"),
        ("x/ {{- .Spool.Begin -}} /y", "x/16/y"),
    ],
)
def test_postfix_templates(template, expected):
    assert postfix.evaluate(template, VALUES) == expected


@pytest.mark.parametrize(
    "template", ["{{ .Spool.Registers }}", '{{ printf "%d" 1 }}', "a={{ .Name", "{{ if .Name }}x{{ end }}"]
)
def test_unsupported_templates_are_rejected(template):
    with pytest.raises(ValueError):
        postfix.check_template(template, "a/b")


def ref(b, e, mod=0, store=""):
    return FragmentRef("j/x", b, e, "0" * 40, pb.NONE, backing_store=store, mod_time=mod)


def test_cover_set_drops_covered_fragments_and_prefers_persisted():
    frags = [ref(0, 10), ref(0, 10, 5, "file:///s/"), ref(2, 8, 5, "file:///s/"), ref(5, 20), ref(20, 20), ref(15, 30)]
    out = cover_set(frags)
    assert [(f.begin, f.end, f.mod_time) for f in out] == [(0, 10, 5), (5, 20, 0), (15, 30, 0)]


def test_index_query_longest_cover_and_jumps():
    idx = FragmentIndex()
    idx.replace_remote(
        [ref(10, 20, 100, "file:///s/"), ref(10, 30, 100, "file:///s/"), ref(50, 60, 200, "file:///s/")], 0
    )
    now = 100 + 3600
    assert idx.query(15, [], now=now).fragment.end == 30
    jump = idx.query(0, [], now=now)  # a hole before the first fragment: jump
    assert (jump.offset, jump.fragment.begin) == (10, 10)
    assert idx.query(35, [], now=now) is None  # a recent hole in the middle: wait
    assert idx.query(35, [], now=100 + 7 * 3600).offset == 50  # an old one: jump
    assert idx.query(15, [], begin_mod_time=101, now=now).offset == 50  # skip older fragments
    assert idx.query(35, [ref(35, 40)], now=now).fragment.end == 40  # local spool covers it


def test_apply_registers():
    regs = label_set({"aa": ["1", "2"], "bb": "x"})
    out = apply_registers(regs, union=label_set({"aa": "3"}), subtract=label_set({"bb": "x", "cc": "y"}))
    assert out == label_set({"aa": "3"})
    assert apply_registers(regs, pb.LabelSet(), label_set({"aa": "1"})) == label_set({"aa": "2", "bb": "x"})


def test_spool_recovery_truncates_to_the_last_record(tmp_path):
    d = str(tmp_path)
    s = Spool.create("j/x", d, 100, pb.NONE, b"")
    s.write(b"hello")
    rec = s.make_record(label_set({"kk": "v"}).SerializeToString(), 1.0)
    s.sync([rec])
    s.write(b" unacked")  # never committed
    s.close()
    with open(s.log_path, "ab") as f:
        f.write(b"\x50\x53\x5a\x47 torn record")
    r = Spool.recover("j/x", d, 100)
    assert (r.begin, r.end, r.seq_end) == (100, 105, 105)
    assert os.path.getsize(r.data_path) == 5
    assert r.durable.registers_proto() == label_set({"kk": "v"})
    r.write(b"!")
    assert r.make_record(b"", 2.0).digest == hashlib.sha1(b"hello!").digest()
    r.close()


def test_a_crash_while_removing_a_persisted_spool_leaves_it_recoverable(tmp_path, monkeypatch):
    """kill -9 between the two unlinks of remove_files: the restart drops the spool instead of
    finding commit records whose data file is gone (found by the kill -9 durability test)."""
    d = str(tmp_path)
    s = Spool.create("j/x", d, 100, pb.NONE, b"")
    s.write(b"persisted content")
    s.sync([s.make_record(b"", 1.0)])
    s.close()
    real_unlink, calls = os.unlink, []

    def die_after_first(path):
        calls.append(path)
        if len(calls) > 1:
            raise SystemExit("killed")
        real_unlink(path)

    monkeypatch.setattr(os, "unlink", die_after_first)
    with pytest.raises(SystemExit):
        s.remove_files()
    monkeypatch.setattr(os, "unlink", real_unlink)
    assert Spool.recover("j/x", d, 100) is None
    assert os.listdir(d) == []


def test_spool_without_a_valid_record_is_dropped(tmp_path):
    d = str(tmp_path)
    s = Spool.create("j/x", d, 0, pb.NONE, b"")
    s.close()
    with open(s.log_path, "wb") as f:
        f.write(b"junk")
    assert Spool.recover("j/x", d, 0) is None
    assert not os.path.exists(s.data_path) and not os.path.exists(s.log_path)
