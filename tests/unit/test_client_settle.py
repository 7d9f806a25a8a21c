"""client/settle.py: holes of a listing below the planned end, and which of them are gone."""

from __future__ import annotations

import time

from pyspark_gazette.client.list_apply import ListedFragment
from pyspark_gazette.client.settle import HOLE_JUMP_AGE, holes, is_gone, ordered
from pyspark_gazette.protocol import pb


def frag(begin: int, end: int, mod_time: int = 0, sha: bytes = b"") -> ListedFragment:
    f = pb.Fragment(journal="a/b", begin=begin, end=end, mod_time=mod_time)
    if sha:
        f.sum.part1 = int.from_bytes(sha[:8], "big")
    return ListedFragment(f)


def test_holes_between_fragments_and_below_the_head():
    frags = ordered([frag(100, 200), frag(0, 100), frag(300, 400), frag(150, 250)])
    assert holes(frags, 400) == [(250, 300)]
    assert holes(frags, 500) == [(250, 300), (400, 500)]  # the primary is ahead of this listing
    assert holes(frags, 350) == [(250, 300)]  # an end inside the last fragment adds nothing
    assert holes((), 500) == []  # nothing listed: the journal starts at its head


def test_merged_listings_drop_duplicates_and_fill_holes():
    mine = [frag(0, 100, 1, b"a" * 8), frag(200, 300)]
    theirs = [frag(0, 100, 1, b"a" * 8), frag(100, 200)]
    merged = ordered([*mine, *theirs])
    assert [(f.spec.begin, f.spec.end) for f in merged] == [(0, 100), (100, 200), (200, 300)]
    assert holes(merged, 300) == []


def test_only_a_hole_before_a_long_persisted_fragment_is_gone():
    now = time.time()
    old, recent = int(now - HOLE_JUMP_AGE - 60), int(now - 60)
    assert is_gone((100, 200), [frag(0, 100, recent), frag(200, 300, old)], now)
    assert not is_gone((100, 200), [frag(0, 100, old), frag(200, 300, recent)], now)  # maybe not listed yet
    assert not is_gone((100, 200), [frag(0, 100, old), frag(200, 300, 0)], now)  # a spool follows: a replica's gap
    assert not is_gone((100, 200), [frag(0, 100, old)], now)  # the tail: below the primary's head
