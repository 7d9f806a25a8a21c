"""Planning from a store listing, one module at a time: fragments/listing.py (journals from one
listing, Gazette's read chain over overlapping fragments) and the ``store.url`` options."""

from __future__ import annotations

import hashlib
import io
import time

import pytest

from pyspark_gazette.errors import OptionError
from pyspark_gazette.fragments import FragmentRef, FragmentStore
from pyspark_gazette.fragments.listing import common_directory, list_store, read_chain, split_directory
from pyspark_gazette.protocol import pb
from pyspark_gazette.spark.options import ReadOptions


def ref(begin: int, end: int, journal: str = "j") -> FragmentRef:
    return FragmentRef(journal, begin, end, "0" * 40, pb.NONE)


@pytest.mark.parametrize(
    "fragments,chain",
    [
        ([(0, 100), (100, 200)], [(0, 100), (100, 200)]),
        # At 100, the longest fragment covering it: [20, 300), not [10, 150).
        ([(0, 100), (10, 150), (20, 300)], [(0, 100), (20, 300)]),
        # Covered and empty fragments are never read; a hole jumps to the longest beginning next.
        ([(0, 100), (0, 50), (30, 60), (100, 100), (250, 300), (250, 400)], [(0, 100), (250, 400)]),
        ([(0, 100), (0, 100)], [(0, 100)]),
        ([], []),
    ],
)
def test_read_chain_is_gazettes_longest_covering_fragment(fragments, chain):
    assert [(r.begin, r.end) for r in read_chain([ref(b, e) for b, e in fragments])] == chain


def test_journal_names_and_postfixes_from_directories():
    assert split_directory("a/b/c", {"a/b"}, None) == ("a/b", "c")
    assert split_directory("a/b/c", {"a/b", "a/b/c"}, None) == ("a/b/c", "")
    assert split_directory("x/y", {"a/b"}, None) == ("", "")
    flow = "acme/orders/ffd1/region=eu/pivot=00/utc_date=2026-01-01/utc_hour=05"
    assert split_directory(flow, None, None) == (
        "acme/orders/ffd1/region=eu/pivot=00",
        "utc_date=2026-01-01/utc_hour=05",
    )
    assert split_directory("a/b/date=1/hour=2", None, 2) == ("a/b", "date=1/hour=2")
    assert split_directory("a/b", None, None) == ("a/b", "")
    assert split_directory("a", None, 1) == ("", "")
    assert common_directory(["a/b/c", "a/b/d"]) == "a/b/"
    assert common_directory(["a/bc", "a/bd"]) == "a/"
    assert common_directory(["x", "y/z"]) == ""
    assert common_directory(["acme/orders/"]) == "acme/orders/"


def _put(store: FragmentStore, journal: str, begin: int, content: bytes, postfix: str = "") -> FragmentRef:
    r = FragmentRef(
        journal, begin, begin + len(content), hashlib.sha1(content).hexdigest(), pb.NONE, path_postfix=postfix
    )
    store.put(r, io.BytesIO(content))
    return r


def test_one_listing_gives_every_journal_and_counts_what_is_not_a_fragment(tmp_path):
    store = FragmentStore("file:///s/", file_root=str(tmp_path))
    _put(store, "a/one", 0, b"x\n" * 5)
    _put(store, "a/one", 10, b"y\n" * 5, postfix="date=2026-01-01")
    _put(store, "a/two/pivot=00", 0, b"z\n", postfix="utc_date=2026-01-01/utc_hour=00")
    (tmp_path / "s" / "a" / "one" / "README").write_text("not a fragment")
    (tmp_path / "s" / "top.txt").write_text("not a fragment, and no journal")
    got = list_store(store, "", journals={"a/one", "a/two/pivot=00"})
    assert sorted(got.fragments) == ["a/one", "a/two/pivot=00"]
    assert [(r.begin, r.end, r.path_postfix) for r in got.fragments["a/one"]] == [
        (0, 10, ""),
        (10, 20, "date=2026-01-01"),
    ]
    assert got.skipped == 2 and "README" in got.skipped_text() and got.files == 5
    assert all(r.mod_time >= int(time.time()) - 60 and r.backing_store == "file:///s/" for r in got.fragments["a/one"])
    auto = list_store(store, "a/")
    assert "a/two/pivot=00" in auto.fragments  # the Flow name ends at pivot=
    assert list_store(store, "", journals={"a/one"}).others == 1


@pytest.mark.parametrize(
    "options,key,text",
    [
        ({"journals": "a/b"}, "framing", "needs the framing option"),
        ({"journals": "a/b", "framing": "ndjson", "signedUrls": "true"}, "signedUrls", "brokers"),
        ({"journals": "a/b", "framing": "ndjson", "directReads": "false"}, "directReads", "brokers"),
        ({"selector": "app=x", "framing": "ndjson"}, "selector", "journal names only"),
        ({"journals": "a/b", "framing": "ndjson", "store.url": "s3://b/p/?find=a&replace=b"}, "store.url", "find"),
        ({"journals": "a/b", "framing": "ndjson", "store.url": "s3://b/p"}, "store.url", "end"),
    ],
)
def test_store_options_errors_name_the_option(options, key, text):
    with pytest.raises(OptionError) as err:
        ReadOptions.parse({"store.url": "s3://b/p/", **options}, env={})
    assert err.value.option == key and text in str(err.value)


def test_a_store_read_needs_no_broker_address_and_a_collection_is_ndjson():
    opts = ReadOptions.parse({"store.url": "file:///data/", "collection": "acme/orders"}, env={})
    assert opts.connection.address == "" and opts.framing == "ndjson" and opts.read_committed
    assert opts.connection.file_root == "/" and opts.store_url == "file:///data/"
    with pytest.raises(OptionError) as err:
        ReadOptions.parse({"journals": "a/b", "store.pathPostfixDepth": "2"}, env={})
    assert err.value.option == "store.pathPostfixDepth"


def test_a_snapshot_ends_at_a_young_hole_and_reads_over_an_old_one():
    from pyspark_gazette.spark.read.store_plan import info_of, snapshot

    opts = ReadOptions.parse({"store.url": "file:///s/", "journals": "acme/b", "framing": "ndjson"}, env={})
    now = 1_800_000_000.0

    def frag(begin: int, end: int, age: float) -> FragmentRef:
        return FragmentRef("acme/b", begin, end, "0" * 40, pb.NONE, "file:///s/", int(now - age))

    info = info_of("acme/b", opts)
    whole = snapshot(info, [frag(0, 10, 9e4), frag(10, 20, 9e4), frag(20, 30, 60)], opts, now)
    assert (whole.snap.write_head, whole.young_hole, whole.snap.earliest) == (30, None, 0)
    # [10, 20) is missing before a fragment persisted a minute ago: not decidable, the history ends at 10.
    young = snapshot(info, [frag(0, 10, 9e4), frag(20, 30, 60)], opts, now)
    assert (young.snap.write_head, young.young_hole, young.stored_end) == (10, (10, 20), 30)
    assert [f.spec.end for f in young.snap.fragments] == [10]
    # Before a fragment persisted 7 hours ago: lost (Gazette's 6 hours), read over.
    old = snapshot(info, [frag(0, 10, 9e4), frag(20, 30, 7 * 3600)], opts, now)
    assert (old.snap.write_head, old.young_hole) == (30, None)
    # A hole before every fragment (retention) is no hole: the journal starts at its first fragment.
    pruned = snapshot(info, [frag(40, 50, 60)], opts, now)
    assert (pruned.snap.earliest, pruned.snap.write_head, pruned.young_hole) == (40, 50, None)


def test_hole_age_threshold_judges_store_holes_too():
    from pyspark_gazette.spark.read.store_plan import info_of, snapshot

    opts = ReadOptions.parse(
        {"store.url": "file:///s/", "journals": "acme/b", "framing": "ndjson", "holeAgeThreshold": "30s"}, env={}
    )
    now = 1_800_000_000.0
    frags = [
        FragmentRef("acme/b", b, e, "0" * 40, pb.NONE, "file:///s/", int(now - 60)) for b, e in ((0, 10), (20, 30))
    ]
    s = snapshot(info_of("acme/b", opts), frags, opts, now)
    assert (s.snap.write_head, s.young_hole) == (30, None)  # a minute old is old enough at 30s
