"""Pieces of ``commitWhen=persisted`` (spark/write/persisted.py) and the register values of a
re-run after a loss (spark/write/stream.py)."""

from __future__ import annotations

import pytest

from pyspark_gazette.client.list_apply import ListedFragment
from pyspark_gazette.errors import OptionError
from pyspark_gazette.protocol import pb
from pyspark_gazette.protocol.labels import label_values
from pyspark_gazette.spark.write import persisted
from pyspark_gazette.spark.write.stream import FUTURE_WINDOW, register_guard


def frag(begin: int, end: int, mod_time: int = 0) -> ListedFragment:
    return ListedFragment(pb.Fragment(journal="j", begin=begin, end=end, mod_time=mod_time), "")


def test_covered_by_persisted_fragments_only():
    frags = [frag(0, 100, 5), frag(100, 200, 0), frag(250, 300, 7)]
    assert persisted.covered(frags, 0, 100, persisted=True) == []
    assert persisted.covered(frags, 50, 150, persisted=True) == [(100, 150)]
    assert persisted.covered(frags, 50, 150, persisted=False) == []
    assert persisted.covered(frags, 150, 300, persisted=False) == [(200, 250)]
    assert persisted.covered(frags, 250, 400, persisted=True) == [(300, 400)]  # past the write head


def test_record_round_trip(tmp_path):
    rec = persisted.Record(persisted={"a/b": {0, 2}}, lost={"a/b": {1: 2}})
    persisted.save_record(str(tmp_path), 7, rec)
    assert persisted.load_records(str(tmp_path)) == {7: rec}
    assert persisted.load_records(str(tmp_path / "none")) == {}


@pytest.mark.parametrize("location", [None, "", "s3a://bucket/chk", "hdfs:///chk"])
def test_checkpoint_must_be_local(location):
    with pytest.raises(OptionError) as e:
        persisted.checkpoint_dir(location)
    assert "commitWhen" in str(e.value)


def test_checkpoint_dir_of_a_path_or_file_url():
    assert persisted.checkpoint_dir("/chk/q1") == "/chk/q1"
    assert persisted.checkpoint_dir("file:///chk/q1") == "/chk/q1"


def spec(**fragment) -> pb.JournalSpec:
    s = pb.JournalSpec(name="j")
    for k, v in fragment.items():
        if k == "stores":
            s.fragment.stores.extend(v)
        else:
            getattr(s.fragment, k).seconds = v
    return s


def test_check_journal_needs_a_store_and_a_flush_interval():
    from pyspark_gazette.client import JournalInfo

    def info(s):
        return JournalInfo(s, 1, 1, pb.Route())

    persisted.check_journal("j", info(spec(stores=["file:///s/"], flush_interval=60)))
    for s, missing in (
        (spec(flush_interval=60), "no fragment store"),
        (spec(stores=["file:///s/"]), "no flush_interval"),
    ):
        with pytest.raises(OptionError) as e:
            persisted.check_journal("j", info(s))
        assert "'j'" in str(e.value) and missing in str(e.value) and "commitWhen" in str(e.value)


def refused(check: pb.LabelSelector, key: str) -> set[str]:
    return set(label_values(check.exclude, key))


def test_register_values_of_a_rerun_after_a_loss():
    key = "gzsink/q/0"
    check, union = register_guard(key, 5)
    assert label_values(union, key) == ["5"] and "5.1" not in refused(check, key)  # the default mode
    check, union = register_guard(key, 5, reruns=True)
    assert label_values(union, key) == ["5"]
    assert {"5", "5.1", "5.2", "6", str(5 + FUTURE_WINDOW)} <= refused(check, key)
    # The first re-run of a lost append: not refused by the lost append's "5", refuses itself.
    check, union = register_guard(key, 5, lost=1)
    assert label_values(union, key) == ["5.1"]
    got = refused(check, key)
    assert "5" not in got and {"5.1", "5.2", "6"} <= got
    # A second loss of the same partition: "5.1" (the lost re-run) no longer refuses it.
    check, union = register_guard(key, 5, lost=2)
    assert label_values(union, key) == ["5.2"] and "5.1" not in refused(check, key)
