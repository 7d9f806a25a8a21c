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
    from pyspark_gazette.client.settle import primary_head

    # The primary joined after the appends (its index ends at 0); a member of their pipeline has them.
    conns = _Conns({"b1": 0, "b2": 9510, "b3": 0}, primary="b1")
    assert primary_head(conns, "j/x") == 9510
    assert conns.asked[:2] == ["bootstrap", "b1"] and sorted(conns.asked[2:]) == ["b2", "b3"]  # the primary first


def test_a_dead_cached_endpoint_is_passed_over_through_the_bootstrap():
    from pyspark_gazette.client.settle import primary_head

    conns = _Conns({"b1": 100, "b2": 100, "b3": 0}, primary="b2", down={"dead"})
    conns.routes["j/x"] = conns.route_pb.__class__(
        members=conns.route_pb.members, endpoints=["b1", "dead", "b3"], primary=1
    )
    assert primary_head(conns, "j/x") == 100
    assert conns.asked[:2] == ["dead", "bootstrap"]


def test_a_sweep_of_many_journals_keeps_the_largest_head_of_each_route():
    """Planning several journals sweeps their heads in one window: each journal's primary and
    its other route members, the largest kept (the single-journal rule of primary_head)."""
    from pyspark_gazette.client.heads import sweep_heads

    conns = _Conns({"b1": 0, "b2": 9510, "b3": 0}, primary="b1")  # the primary joined late
    names = [f"j/{i}" for i in range(5)]
    for n in names:
        conns.routes[n] = conns.route_pb
    assert sweep_heads(conns, names, 4, primary=True) == dict.fromkeys(names, 0)  # the primary alone stops short
    conns.asked.clear()
    assert sweep_heads(conns, names, 4, primary=True, members=True) == dict.fromkeys(names, 9510)
    assert conns.asked == ["b1", "b2", "b3"] * 5  # the primary first, one Read per member
    conns.asked.clear()
    assert sweep_heads(conns, names[:2], 4, primary=True, members=True, others_only=True) == dict.fromkeys(
        names[:2], 9510
    )
    assert conns.asked == ["b2", "b3"] * 2  # the primary's answer is the caller's already
    # A member that fails is left out; the primary's answer stands.
    conns.down = {"b2"}
    assert sweep_heads(conns, names[:1], 4, primary=True, members=True) == {names[0]: 0}
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
