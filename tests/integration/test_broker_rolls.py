"""When spools roll into fragments: length, flush interval, codec changes, shutdown."""

from __future__ import annotations

import math

from pyspark_gazette.protocol import pb


def spans(gz, journal):
    return [(f.spec.begin, f.spec.end, f.spec.compression_codec) for f in gz.fragments(journal).fragments]


def test_roll_only_when_content_is_greater_than_length(gz):
    j = gz.create(length=1024, codec=pb.NONE, stores=[]).name
    gz.append(j, b"a" * 1024)  # exactly length: no roll before the next append
    gz.append(j, b"b")
    assert spans(gz, j) == [(0, 1025, pb.NONE)]
    gz.append(j, b"c")  # 1025 > 1024: roll first; a fragment never splits an append
    gz.append(j, b"d" * 5000)
    gz.append(j, b"e")
    assert spans(gz, j) == [(0, 1025, pb.NONE), (1025, 6026, pb.NONE), (6026, 6027, pb.NONE)]


def test_codec_change_takes_effect_at_the_next_roll(gz):
    spec = gz.create(length=1024, codec=pb.NONE, stores=[])
    gz.append(spec.name, b"x" * 2000)
    spec.fragment.compression_codec = pb.GZIP
    assert gz.apply(pb.ApplyRequest.Change(expect_mod_revision=-1, upsert=spec)).status == pb.OK
    r = gz.append(spec.name, b"y")
    assert r.commit.compression_codec == pb.GZIP
    assert spans(gz, spec.name) == [(0, 2000, pb.NONE), (2000, 2001, pb.GZIP)]


def test_flush_interval_rolls_on_utc_boundaries(gz):
    j = gz.create(length=1 << 30, codec=pb.ZSTANDARD, flush=60).name
    gz.append(j, b"first")
    journal = gz.broker.core.journal(j)
    first = journal.current.first_append_time
    boundary = (math.floor(first / 60) + 1) * 60
    assert not journal.needs_roll(boundary - 0.001)
    assert journal.needs_roll(boundary)
    assert journal.flush_interval_deadline() == boundary
    # An idle journal is rolled by the refresher once the boundary passed (here: told it has).
    journal.roll_idle(boundary + 1)
    assert gz.broker.wait_persisted(30)
    frags = gz.fragments(j).fragments
    assert [(f.spec.begin, f.spec.end) for f in frags] == [(0, 5)] and frags[0].spec.mod_time > 0
    assert gz.append(j, b"second").commit.begin == 5
    assert gz.content(j) == b"firstsecond"


def test_stores_added_later_persist_waiting_fragments(gz):
    spec = gz.create(length=1024, codec=pb.NONE, stores=[])
    gz.append(spec.name, b"x" * 1100)
    gz.append(spec.name, b"y")
    assert [f.spec.mod_time for f in gz.fragments(spec.name).fragments] == [0, 0]
    spec.fragment.stores.append(gz.store)
    assert gz.apply(pb.ApplyRequest.Change(expect_mod_revision=-1, upsert=spec)).status == pb.OK
    assert gz.broker.wait_persisted(30)
    frags = gz.fragments(spec.name).fragments
    assert frags[0].spec.mod_time > 0 and frags[0].spec.backing_store == gz.store
    assert gz.content(spec.name) == b"x" * 1100 + b"y"


def test_idle_spool_rolls_and_persists_at_its_flush_boundary_without_a_relisting(gz):
    # Like Gazette's periodic zero-byte append, an idle spool whose flush interval ended is rolled
    # and persisted by a timer of its own, not at the store's next listing (an hour away here).
    j = gz.create(length=1 << 30, codec=pb.NONE, flush=60, refresh=3600).name
    journal = gz.broker.core.journal(j)
    assert journal.listed.wait(30)  # the journal's one listing for the next hour is done
    gz.append(j, b"idle tail")

    def persisted() -> bool:
        return not journal.local_refs() and journal.index.remote_end() == len(b"idle tail")

    with journal.cond:
        assert journal.cond.wait_for(persisted, timeout=150)
    frags = gz.fragments(j).fragments
    assert [(f.spec.begin, f.spec.end, f.spec.backing_store) for f in frags] == [(0, 9, gz.store)]
    assert frags[0].spec.mod_time > 0
    assert gz.append(j, b"more").commit.begin == 9
    assert gz.content(j) == b"idle tailmore"
