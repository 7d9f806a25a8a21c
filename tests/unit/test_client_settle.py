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


def test_a_hole_is_gone_as_gazette_judges_it_by_the_age_of_the_fragment_after_it():
    now = time.time()
    old, recent = int(now - HOLE_JUMP_AGE - 60), int(now - 60)
    assert is_gone((100, 200), [frag(0, 100, recent), frag(200, 300, old)], now)
    assert not is_gone((100, 200), [frag(0, 100, old), frag(200, 300, recent)], now)  # maybe still uploading
    assert not is_gone((100, 200), [frag(0, 100, old), frag(200, 300, 0)], now)  # a spool follows: a replica's gap
    assert not is_gone((100, 200), [frag(0, 100, old)], now)  # the tail: below the primary's head
    assert is_gone((0, 200), [frag(200, 300, recent)], now)  # before every fragment: pruned
    assert not is_gone((0, 200), [frag(200, 300, 0)], now)  # ... but only before a persisted one
    # The threshold is the caller's (holeAgeThreshold): the age decides, from exactly the threshold on.
    assert is_gone((100, 200), [frag(0, 100, recent), frag(200, 300, recent)], now, threshold=60)
    assert not is_gone((100, 200), [frag(0, 100, recent), frag(200, 300, recent)], now, threshold=61)
    assert is_gone((100, 200), [frag(0, 100, recent), frag(200, 300, recent)], now, threshold=0)
    assert is_gone((100, 200), [frag(0, 100, old), frag(200, 300, 0)], now, threshold=0)  # a spool: age 0
    assert not is_gone((100, 200), [frag(0, 100, old)], now, threshold=0)  # up to a head: never


def test_the_verdict_keeps_young_holes_pending_and_says_why():
    from pyspark_gazette.client.settle import judged

    now = time.time()
    old, recent = int(now - 7200), int(now - 60)
    frags = ordered([frag(0, 100, old), frag(200, 300, old), frag(400, 500, recent), frag(500, 600)])
    done = judged(frags, 700, "", True, "", 3600, "a/b", now)
    assert done.holes == ((100, 200), (300, 400), (600, 700))
    assert done.lost == ((100, 200),)  # the fragment after it is two hours old
    assert done.pending == ((300, 400), (600, 700))  # a young fragment after it; nothing after it
    assert "less than holeAgeThreshold (1h)" in done.why and "upload is still in flight" in done.why
    assert time.strftime("%H:%M:%S", time.gmtime(recent + 3600)) in done.why  # from when it is judged lost
    assert done.pending_in(0, 300) == [] and done.pending_in(350, 360) == [(300, 400)]
    assert judged(frags, 700, "", True, "", 30, "a/b", now).pending == ((600, 700),)  # a smaller threshold
    unanswered = judged(frags, 700, "", False, "s3://b/: denied", 3600, "a/b", now)
    assert "did not answer" in unanswered.why and "s3://b/: denied" in unanswered.why


class _Stub:
    def __init__(self, broker):
        self.broker = broker

    def Read(self, request, **_):  # noqa: N802 - the gRPC method's name
        return self.broker.read(request)


class _Conns:
    """Connections to brokers that each report their own write head (Gazette: the end of that
    broker's fragment index) and the route; ``down`` ones fail at the transport."""

    def __init__(self, heads: dict[str, int], primary: str, down=()):
        from pyspark_gazette.protocol import pb

        self.heads, self.down, self.asked = heads, set(down), []
        names = sorted(heads)
        self.route_pb = pb.Route(
            members=[pb.ProcessSpec.ID(zone="z", suffix=n) for n in names],
            endpoints=names,
            primary=names.index(primary),
        )
        self.routes: dict = {}
        self.config = type("Config", (), {"timeout": 5.0})()

    def read_request(self, journal, **fields):
        from pyspark_gazette.protocol import pb

        return pb.ReadRequest(journal=journal, **fields)

    def read(self, request):
        import grpc

        from pyspark_gazette.protocol import pb

        endpoint = self.asked[-1]
        if endpoint in self.down:
            err = grpc.RpcError()
            err.code = lambda: grpc.StatusCode.UNAVAILABLE
            raise err
        head = self.heads.get(endpoint, 0)  # the bootstrap: a member that joined late
        return [
            pb.ReadResponse(status=pb.OFFSET_NOT_YET_AVAILABLE, write_head=head, header=pb.Header(route=self.route_pb))
        ]

    def stub(self, endpoint):
        self.asked.append(endpoint)
        return _Stub(self)

    def call_kwargs(self, timeout=None):
        return {}

    def update_route(self, journal, header):
        self.routes[journal] = header.route

    def route(self, journal):
        return self.routes.get(journal)

    def forget_route(self, journal):
        self.routes.pop(journal, None)

    def endpoint_failed(self, journal, endpoint):
        self.forget_route(journal)

    def append_endpoint(self, journal):
        r = self.routes.get(journal)
        return r.endpoints[r.primary] if r is not None else "bootstrap"


def test_the_planned_head_is_the_largest_any_route_member_reports():
    from pyspark_gazette.client.heads import HeadMode, route_heads

    # The primary joined after the appends (its index ends at 0); a member of their pipeline has them.
    conns = _Conns({"b1": 0, "b2": 9510, "b3": 0}, primary="b1")
    assert route_heads(conns, ["j/x"], HeadMode.CONFIRMED) == {"j/x": 9510}
    assert conns.asked[:2] == ["bootstrap", "b1"] and sorted(conns.asked[2:]) == ["b2", "b3"]  # the primary first


def test_a_dead_cached_endpoint_is_passed_over_through_the_bootstrap():
    from pyspark_gazette.client.heads import HeadMode, route_heads

    conns = _Conns({"b1": 100, "b2": 100, "b3": 0}, primary="b2", down={"dead"})
    conns.routes["j/x"] = conns.route_pb.__class__(
        members=conns.route_pb.members, endpoints=["b1", "dead", "b3"], primary=1
    )
    assert route_heads(conns, ["j/x"], HeadMode.CONFIRMED) == {"j/x": 100}
    assert conns.asked[:2] == ["dead", "bootstrap"]


def test_a_sweep_of_many_journals_keeps_the_largest_head_of_each_route():
    """Planning several journals sweeps their heads in one window: each journal's primary and
    its other route members, the largest kept (HeadMode.EVERY_MEMBER)."""
    from pyspark_gazette.client.heads import HeadMode, route_heads

    conns = _Conns({"b1": 0, "b2": 9510, "b3": 0}, primary="b1")  # the primary joined late
    names = [f"j/{i}" for i in range(5)]
    for n in names:
        conns.routes[n] = conns.route_pb
    assert route_heads(conns, names, HeadMode.PRIMARY, 4) == dict.fromkeys(names, 0)  # the primary alone stops short
    conns.asked.clear()
    assert route_heads(conns, names, HeadMode.EVERY_MEMBER, 4) == dict.fromkeys(names, 9510)
    assert conns.asked == ["b1", "b2", "b3"] * 5  # the primary first, one Read per member
    conns.asked.clear()
    assert route_heads(conns, names[:2], HeadMode.OTHER_MEMBERS, 4) == dict.fromkeys(names[:2], 9510)
    assert conns.asked == ["b2", "b3"] * 2  # the primary's answer is the caller's already
    # A member that fails is left out; the primary's answer stands.
    conns.down = {"b2"}
    assert route_heads(conns, names[:1], HeadMode.EVERY_MEMBER, 4) == {names[0]: 0}
    assert conns.route(names[0]) is not None  # a member's failure does not forget the route


def test_a_listing_vouches_for_a_head_only_with_spool_content_reaching_it():
    from pyspark_gazette.client.settle import spool_vouches

    now = int(time.time())
    assert spool_vouches([frag(0, 100, now), frag(100, 250)], 250)  # the answering member's spool reaches it
    assert spool_vouches([frag(100, 300)], 250)  # beyond it: the end planned is the larger
    assert not spool_vouches([frag(0, 100, now), frag(100, 200)], 250)  # the spool ends short
    assert not spool_vouches([frag(0, 250, now)], 250)  # persisted only: a late joiner lists the same
    assert not spool_vouches([frag(0, 100, now), frag(250, 250)], 250)  # an empty spool (rolled at a join)
    assert not spool_vouches([], 0)  # nothing listed


# -- which holes are lost at once, which are awaited, and for how long (settle, fill) ---------


class _Listings:
    """Connections whose route members list ``rounds`` in turn (the last one from then on),
    with a fake clock that the injected sleep advances."""

    def __init__(self, monkeypatch, rounds, broker_timeout=None):
        import pyspark_gazette.client.settle as settle_mod

        self.rounds, self.calls, self.clock, self.slept = list(rounds), 0, 1000.0, []
        self.config = type("Config", (), {"timeout": 5.0, "broker_timeout": broker_timeout})()

        def listings(conns, journal, ttl):
            got = self.rounds[min(self.calls, len(self.rounds) - 1)]
            self.calls += 1
            return list(got), True

        monkeypatch.setattr(settle_mod, "_members_listings", listings)
        monkeypatch.setattr(settle_mod.time, "monotonic", lambda: self.clock)

    def route(self, journal):
        return None

    def sleep(self, seconds):
        self.slept.append(seconds)
        self.clock += seconds


def _stores(store, stores=("file:///s/",)) -> dict:
    """``stores`` and ``list_store`` arguments: a store holding the spans of ``store`` (a list the
    test may extend; ``None``: a store this process cannot list)."""
    from pyspark_gazette.fragments import FragmentRef

    def list_store(url, journal):
        if store is None:
            return None
        t = int(time.time())
        return [FragmentRef(journal, b, e, "0" * 40, pb.ZSTANDARD, backing_store=url, mod_time=t) for b, e in store]

    return {"stores": stores, "list_store": list_store}


def _settle(conns, listed, store=None, stores=("file:///s/",), threshold=None):
    from pyspark_gazette.client.settle import HOLE_JUMP_AGE, settle

    return settle(
        conns, "a/b", listed, ask_primary=False, threshold=threshold or HOLE_JUMP_AGE, **_stores(store, stores)
    )


def test_a_hole_no_member_lists_and_the_store_lacks_is_lost_at_once_only_when_aged(monkeypatch, caplog):
    from pyspark_gazette.client.settle import fill

    hour_ago = int(time.time()) - 3600
    listed = [frag(0, 100, hour_ago), frag(200, 300, hour_ago)]
    conns = _Listings(monkeypatch, [listed])
    old = _settle(conns, listed, store=[(0, 100), (200, 300)], threshold=1800)  # the file of [100, 200) was deleted
    assert old.holes == ((100, 200),) and old.pending == ()
    with caplog.at_level("INFO", logger="pyspark_gazette"):
        assert fill(conns, "a/b", old, 0, 300, sleep=conns.sleep) is old
    assert conns.slept == [] and "waiting" not in caplog.text
    young = _settle(conns, listed, store=[(0, 100), (200, 300)])  # 6 h: the fragment after it is young
    assert young.holes == ((100, 200),) and young.pending == ((100, 200),)


def test_a_fragment_the_store_holds_is_planned_from_the_store_at_once(monkeypatch):
    now = int(time.time())
    listed = [frag(0, 100, now), frag(200, 300, now)]
    conns = _Listings(monkeypatch, [listed])
    done = _settle(conns, listed, store=[(0, 100), (100, 150), (150, 200), (200, 300)])
    assert done.holes == () and done.pending == ()
    spans = [(f.spec.begin, f.spec.end, f.stored) for f in done.fragments]
    assert spans == [(0, 100, False), (100, 150, True), (150, 200, True), (200, 300, False)]
    assert conns.slept == []


def test_a_young_hole_is_awaited_only_by_a_read_that_touches_it_until_it_lands(monkeypatch, caplog):
    from pyspark_gazette.client.settle import fill

    now = int(time.time())
    listed = [frag(0, 100, now), frag(200, 300, now)]
    store: list = [(0, 100), (200, 300)]
    conns = _Listings(monkeypatch, [listed], broker_timeout=300.0)
    done = _settle(conns, listed, store=store)
    assert done.pending == ((100, 200),) and "upload is still in flight" in done.why
    caplog.set_level("INFO", logger="pyspark_gazette")
    assert fill(conns, "a/b", done, 200, 300, sleep=conns.sleep) is done  # starts after it
    assert fill(conns, "a/b", done, 0, 100, sleep=conns.sleep) is done  # ends before it
    assert conns.slept == [] and "waits" not in caplog.text

    def lands(seconds):  # the fragment's upload lands in the store during the second wait
        conns.sleep(seconds)
        if len(conns.slept) == 2:
            store.append((100, 200))

    filled = fill(conns, "a/b", done, 150, 300, sleep=lands, **_stores(store))
    assert filled.holes == () and [(f.spec.begin, f.spec.end, f.stored) for f in filled.fragments][1] == (
        100,
        200,
        True,
    )
    waited = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert "offsets [100, 200) are in no fragment yet and are not judged lost" in waited[0]
    assert "upload is still in flight" in waited[0] and "never skips" in waited[0]
    assert "UTC at most (broker.timeout, 300s)" in waited[0]
    assert "every one is listed now" in waited[-1]


def test_a_young_hole_still_open_at_broker_timeout_raises_hole_in_flight(monkeypatch):
    import pytest

    from pyspark_gazette.client.settle import fill
    from pyspark_gazette.errors import DataLossError, HoleInFlightError

    now = int(time.time())
    listed = [frag(0, 100, now), frag(200, 300, now)]
    conns = _Listings(monkeypatch, [listed], broker_timeout=20.0)
    done = _settle(conns, listed, store=[(0, 100), (200, 300)])
    start = conns.clock
    with pytest.raises(HoleInFlightError) as ei:
        fill(conns, "a/b", done, 0, 300, sleep=conns.sleep, **_stores([(0, 100), (200, 300)]))
    assert not isinstance(ei.value, DataLossError) and conns.clock - start <= 20.0
    text = str(ei.value)
    assert text.startswith(
        "journal 'a/b': offsets [100, 200) are still in no fragment after waiting 20s (broker.timeout)"
    )
    assert "may still be in flight" in text and "broker.timeout" in text and "holeAgeThreshold" in text
    assert ei.value.journal == "a/b" and ei.value.holes == ((100, 200),)


def test_a_young_hole_judged_lost_once_it_ages_during_the_wait(monkeypatch):
    from pyspark_gazette.client.settle import fill

    now = int(time.time())
    listed = [frag(0, 100, now - 100), frag(200, 300, now - 100)]
    conns = _Listings(monkeypatch, [listed], broker_timeout=60.0)
    done = _settle(conns, listed, store=[], threshold=102)
    assert done.pending == ((100, 200),)
    monkeypatch.setattr(time, "time", lambda: now + (conns.clock - 1000.0))  # the wall clock moves with the sleeps
    left = fill(conns, "a/b", done, 0, 300, sleep=conns.sleep, threshold=102, **_stores([]))
    assert left.lost == ((100, 200),) and left.pending == ()


def test_a_hole_is_awaited_when_the_store_cannot_be_listed_here(monkeypatch):
    now = int(time.time())
    listed = [frag(0, 100, now), frag(200, 300, now)]
    conns = _Listings(monkeypatch, [listed])
    done = _settle(conns, listed, store=None)  # a file:// store without store.fileRoot
    assert done.pending == ((100, 200),) and "store.fileRoot" in done.why
    assert _settle(conns, listed, store=None, stores=()).pending == ((100, 200),)  # no store named at all


def test_offsets_in_messages_are_ranges():
    from pyspark_gazette.errors import DataLossError, GazetteError, offset_ranges
    from pyspark_gazette.spark.read.plan import DataLoss

    assert offset_ranges([(88590, 160590)]) == "[88590, 160590)"
    assert offset_ranges([(0, 1), (5, 9)]) == "[0, 1), [5, 9)"
    assert DataLoss is DataLossError and issubclass(DataLossError, GazetteError)
