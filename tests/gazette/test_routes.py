"""Routes on a real Gazette cluster: replication 3, appends to the primary, reads to a member,
proxying by non-member brokers, NO_JOURNAL_PRIMARY_BROKER right after Apply, and journals that
Gazette has suspended. These are Gazette's behaviours; our embedded broker is a single process
(no routes to follow), so they run on the real cluster only."""

from __future__ import annotations

import uuid

import pytest

import realgazette
from journalspecs import make_spec
from pyspark_gazette.client import Change, ClientConfig, JournalClient
from pyspark_gazette.protocol import pb

pytestmark = pytest.mark.slow


@pytest.fixture
def name():
    return f"routes/{uuid.uuid4().hex[:10]}"


def _broker_for(cluster: realgazette.GazetteCluster, suffix: str) -> realgazette.GazetteBroker:
    (broker,) = [b for b in cluster.brokers if b.id == suffix]
    return broker


def test_replication_3_appends_to_the_primary_and_reads_from_members(gazette_cluster, name):
    spec = make_spec(name, store="file:///routes/")
    spec.replication = 3
    gazette_cluster.apply_specs([spec])
    with gazette_cluster.client() as c:
        info = c.get_journal(name)
        assert len(info.route.members) == 3 and len(info.route.endpoints) == 3
        primary = info.route.endpoints[info.route.primary]
        assert primary == _broker_for(gazette_cluster, info.route.members[info.route.primary].suffix).address
        commit = c.append(name, b'{"n":1}\n')
        assert (commit.begin, commit.end) == (0, 8)
        # The client learned the route from the response and sends the next append to the primary,
        # and reads to a member of the route.
        assert c.conns.append_endpoint(name) == primary
        assert c.conns.read_endpoint(name) in list(info.route.endpoints)
        assert c.read_all(name) == b'{"n":1}\n'


def test_a_non_member_broker_proxies_reads_and_appends(gazette_cluster, name):
    spec = make_spec(name, store="file:///routes/")  # replication 1: two brokers are not members
    gazette_cluster.apply_specs([spec])
    with gazette_cluster.client() as c:
        member = c.get_journal(name).route.members[0].suffix
    outsider = next(b for b in gazette_cluster.brokers if b.id != member)
    with JournalClient(ClientConfig(outsider.address)) as c:
        # The first calls go to the configured (non-member) broker, which proxies them.
        assert c.append(name, b"a\n").begin == 0
        assert c.read_all(name) == b"a\n"
    # A Read with do_not_proxy to a non-member is refused with the route to use instead.
    import grpc

    from pyspark_gazette.protocol import pb_grpc

    with grpc.insecure_channel(outsider.address.removeprefix("http://")) as ch:
        resps = list(
            pb_grpc.JournalStub(ch).Read(pb.ReadRequest(journal=name, offset=0, do_not_proxy=True), timeout=30)
        )
    assert resps[0].status == pb.NOT_JOURNAL_BROKER
    assert [m.suffix for m in resps[0].header.route.members] == [member]


def test_append_right_after_apply_waits_out_no_journal_primary(gazette_cluster, name):
    """Gazette assigns a new journal a primary asynchronously; an append in that window gets
    NO_JOURNAL_PRIMARY_BROKER (or INSUFFICIENT_JOURNAL_BROKERS) and our client retries it."""
    spec = make_spec(name, store="file:///routes/")
    spec.replication = 3
    gazette_cluster.make_store_dirs([spec])
    with gazette_cluster.client() as c:
        c.apply([Change(expect_mod_revision=0, upsert=spec)])
        commit = c.append(name, b"first\n")  # no wait for the assignment
        assert commit.begin == 0 and c.read_all(name) == b"first\n"


def test_a_suspended_journal_reads_fully(gazette_cluster, name, tmp_path):
    spec = make_spec(name, store="file:///routes/", length=1024)
    gazette_cluster.apply_specs([spec])
    content = b"".join(f"{i:05d}\n".encode() * 50 for i in range(6))
    with gazette_cluster.client() as c:
        for i in range(6):
            c.append(name, content[i * 300 : (i + 1) * 300])
    # gazctl suspends only journals whose fragments are all persisted (without --force); the
    # broker persists the open spool when asked to suspend.
    gazette_cluster.gazctl("journals", "suspend", "-l", f"name={name}", "--force")
    with gazette_cluster.client() as c:
        suspended = c.get_journal(name)
        assert suspended.spec.suspend.level != pb.JournalSpec.Suspend.NONE
        assert c.read_all(name) == content
    with gazette_cluster.client() as c:
        # Reading from the start of a suspended journal through a fresh client, in Spark's
        # planner's way: ListFragments then the write head.
        frags = c.list_fragments(name)
        assert frags and frags[0].spec.begin == 0 and frags[-1].spec.end == len(content)
