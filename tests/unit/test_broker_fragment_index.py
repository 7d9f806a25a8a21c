"""The broker's fragment index: cover sets and longest-cover queries (broker/fragment/index.py)."""

from __future__ import annotations

from pyspark_gazette.broker.fragment.index import FragmentIndex, cover_set
from pyspark_gazette.fragments import FragmentRef
from pyspark_gazette.protocol import pb


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


def test_all_is_the_cover_set_of_remote_and_local_fragments():
    s = "file:///s/"
    remote = [ref(0, 10, 5, s), ref(2, 8, 5, s), ref(10, 20, 6, s), ref(10, 15, 6, s), ref(30, 40, 7, s)]
    idx = FragmentIndex()
    idx.replace_remote(remote, 0)
    for local in (
        [],
        [ref(40, 45)],  # the spool after every persisted fragment
        [ref(40, 45), ref(45, 45)],  # and an empty one
        [ref(20, 30), ref(30, 50)],  # spools over the hole and over a persisted fragment
        [ref(0, 10)],  # the same span as a persisted fragment: the persisted one is kept
        [ref(35, 60)],  # a spool beginning inside a persisted fragment
    ):
        got = idx.all(local)
        assert got == cover_set(remote + local), local
        got.append(ref(99, 100))  # a new list each time: the index is not changed
        assert idx.all(local) == cover_set(remote + local)
