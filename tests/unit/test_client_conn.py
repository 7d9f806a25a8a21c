from __future__ import annotations

import pickle
import time

import pytest

from pyspark_gazette.client.conn import ClientConfig, Connections, Target, backoff, parse_address
from pyspark_gazette.protocol import pb


@pytest.mark.parametrize(
    "address,target",
    [
        ("http://127.0.0.1:8080", Target("127.0.0.1:8080", False)),
        ("http://localhost", Target("localhost:8080", False)),
        ("https://gazette.example.com", Target("gazette.example.com:443", True)),
        ("https://[::1]:9000", Target("[::1]:9000", True)),
        ("broker:8080", Target("broker:8080", False)),
        ("unix:///var/run/gazette.sock", Target("unix:/var/run/gazette.sock", False)),
    ],
)
def test_parse_address(address, target):
    assert parse_address(address) == target


@pytest.mark.parametrize("bad", ["", "  ", "ftp://host:1", "localhost", "http://:80", "http://host:notaport"])
def test_bad_addresses_are_rejected_with_the_address_named(bad):
    with pytest.raises(ValueError) as ei:
        ClientConfig(bad)
    assert "address" in str(ei.value)


def test_backoff_table():
    assert [backoff(a) for a in range(-1, 8)] == [0, 0.05, 0.05, 0.1, 0.1, 1, 1, 5, 5]


def test_token_is_not_in_repr_but_pickles_and_goes_in_metadata():
    cfg = ClientConfig("http://h:1", auth_token="s3cr3t-token")
    assert "s3cr3t" not in repr(cfg)
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    conns = Connections(cfg)
    assert conns.metadata() == [("authorization", "Bearer s3cr3t-token")]
    assert "s3cr3t" not in repr(conns)
    assert Connections(ClientConfig("http://h:1")).metadata() is None


def test_routes_pick_primary_for_appends_and_same_zone_member_for_reads():
    conns = Connections(ClientConfig("http://default:1", zone="b"))
    assert conns.append_endpoint("j") == "http://default:1"
    route = pb.Route(
        members=[pb.ProcessSpec.ID(zone="a", suffix="x"), pb.ProcessSpec.ID(zone="b", suffix="y")],
        primary=0,
        endpoints=["http://a:1", "http://b:1"],
    )
    conns.update_route("j;meta", pb.Header(route=route))
    assert conns.append_endpoint("j") == "http://a:1"
    assert conns.read_endpoint("j") == "http://b:1"
    conns.forget_route("j")
    assert conns.read_endpoint("j") == "http://default:1"
    # A route without endpoints is no routing hint.
    conns.update_route("k", pb.Header(route=pb.Route(members=route.members, primary=1)))
    assert conns.append_endpoint("k") == "http://default:1"


def test_keepalive_pings_respect_go_grpc_servers_minimum():
    """Gazette's brokers (Go gRPC, default enforcement) count a ping that comes sooner than 5
    minutes after the last one while they have sent nothing, and close the connection at the third
    (GOAWAY too_many_pings), failing every call on it. Seen against gazette v0.103.0 with the old
    30 s pings: calls that waited for minutes on a journal whose store directory was missing, and a
    retried append on the same connection."""
    from pyspark_gazette.client import conn

    options = dict(conn._CHANNEL_OPTIONS)
    assert options["grpc.keepalive_time_ms"] == conn.KEEPALIVE_MS > 5 * 60 * 1000


def test_a_list_of_addresses_bootstraps_from_the_next_when_one_fails():
    conns = Connections(ClientConfig("http://10.0.0.1:8080, 10.0.0.2:8080,unix:///tmp/b.sock"))
    assert conns.address == "http://10.0.0.1:8080"
    conns.endpoint_failed(None, "10.0.0.2:8080")  # not the bootstrap: nothing moves
    assert conns.address == "http://10.0.0.1:8080" and conns.bootstrap_moves == 0
    conns.endpoint_failed(None, "http://10.0.0.1:8080")
    assert conns.address == "10.0.0.2:8080"
    conns.endpoint_failed(None, "10.0.0.2:8080")
    conns.endpoint_failed(None, "unix:///tmp/b.sock")
    assert conns.address == "http://10.0.0.1:8080" and conns.bootstrap_moves == 3  # round again


def test_one_address_falls_back_to_a_broker_learned_from_a_route():
    from pyspark_gazette.protocol import pb

    conns = Connections(ClientConfig("http://10.0.0.1:8080"))
    conns.endpoint_failed(None, "http://10.0.0.1:8080")
    assert conns.address == "http://10.0.0.1:8080"  # nothing learned yet: keep retrying it
    route = pb.Route(primary=0)
    for i in (3, 2):
        route.members.add(zone="z", suffix=f"b{i}")
        route.endpoints.append(f"http://10.0.0.{i}:8080")
    conns.update_route("j/a", pb.Header(route=route))
    conns.endpoint_failed(None, "http://10.0.0.1:8080")
    assert conns.address == "http://10.0.0.2:8080"
    assert conns.read_endpoint("j/other") == "http://10.0.0.2:8080"  # journals without a route go there


@pytest.mark.parametrize("bad", ["http://a:1,", ",http://a:1", "http://a:1,,http://b:2", "http://a:1,ftp://b:2"])
def test_a_bad_item_of_an_address_list_is_refused(bad):
    with pytest.raises(ValueError, match="address"):
        ClientConfig(bad)


def test_a_client_nothing_answered_gives_up_by_lists_rule():
    """Connections.unreachable: the one rule for every call while no broker has answered."""
    import time

    from pyspark_gazette.client.conn import CONNECT_ATTEMPTS
    from pyspark_gazette.errors import BrokerUnreachableError, TransportError

    refused = TransportError(
        "List", "UNAVAILABLE", "failed to connect to all addresses; last error: x: Connection refused"
    )
    conns = Connections(ClientConfig("http://user:pw@127.0.0.1:1", broker_timeout=3600.0))
    now = time.monotonic()
    assert conns.unreachable("List", refused, 0, now) is None  # retried, as List does
    gone = conns.unreachable("List", refused, CONNECT_ATTEMPTS - 1, now)
    assert isinstance(gone, BrokerUnreachableError) and not gone.retriable and gone.__cause__ is refused
    assert str(gone).startswith(
        f"nothing answered at broker.address 'http://REDACTED@127.0.0.1:1' (List: Connection refused; "
        f"{CONNECT_ATTEMPTS} attempt(s) over 0s): check that a broker is running there"
    ), gone
    assert "(broker.timeout applies once a broker has answered)" in str(gone)
    assert pickle.loads(pickle.dumps(gone)).args == gone.args and str(pickle.loads(pickle.dumps(gone))) == str(gone)
    assert isinstance(conns.unreachable("List", refused, 0, now, final=True), BrokerUnreachableError)
    assert conns.unreachable("List", TransportError("List", "INTERNAL", "x"), 99, now) is None
    # A broker.timeout shorter than List's rule cuts the wait, and the error says so.
    short = Connections(ClientConfig("http://127.0.0.1:1", broker_timeout=1.0))
    cut = short.unreachable("List", refused, 1, now - 2.0)
    assert cut is not None and "(broker.timeout, 1s, cut the wait short)" in str(cut)
    # Once a broker has answered, the address is right: broker.timeout alone decides.
    conns.update_route("a/b", pb.Header())
    assert conns.answered and conns.unreachable("List", refused, 99, now - 10_000) is None
    assert "--broker.address 'http://REDACTED@127.0.0.1:1'" in str(gone.for_option("--broker.address", "--bt"))


def test_a_spark_tasks_client_waits_for_brokers_down_as_for_a_restart():
    """A Spark task's client (its query's planning reached the address) never fails fast: brokers
    down when a task starts are a restart, waited for broker.timeout."""
    import time

    from pyspark_gazette.client.conn import CONNECT_ATTEMPTS
    from pyspark_gazette.errors import TransportError
    from pyspark_gazette.spark.options import ReadOptions

    refused = TransportError(
        "Read", "UNAVAILABLE", "failed to connect to all addresses; last error: Connection refused"
    )
    opts = ReadOptions.parse({"broker.address": "http://127.0.0.1:1", "journals": "shop/orders"}, env={})
    task = Connections(opts.connection.client_config(task=True))
    assert task.answered
    assert task.unreachable("Read", refused, CONNECT_ATTEMPTS + 5, time.monotonic() - 60) is None
    planner = Connections(opts.connection.client_config())
    assert planner.unreachable("List", refused, CONNECT_ATTEMPTS - 1, time.monotonic()) is not None


def _header(revision: int, cluster_id: int = 7) -> pb.Header:
    return pb.Header(etcd=pb.Header.Etcd(cluster_id=cluster_id, member_id=3, revision=revision, raft_term=2))


def test_the_remembered_etcd_revision_is_forgotten_only_when_the_cluster_says_it_went_back(caplog):
    """Headers raise the revision Reads and Appends ask for. A lower one of the same cluster
    (a broker lagging) keeps it, but leaves it to be checked before it is asked for again, until
    a header reaches it; another cluster id, or an Apply committed below it, forgets it at once
    with a WARNING naming the revision and the reason."""
    conns = Connections(ClientConfig("http://127.0.0.1:1"))
    conns.saw_header(_header(40))
    conns.saw_header(_header(38))
    assert conns.etcd_revision == 40 and conns.etcd_cluster_id == 7 and conns._revision_doubtful()
    conns.saw_header(_header(40))
    assert not conns._revision_doubtful() and conns.min_etcd_revision("a/journal") == 40
    assert not caplog.records

    conns.saw_header(_header(5, cluster_id=9))
    assert conns.etcd_revision == 5 and conns.etcd_cluster_id == 9 and not conns._revision_doubtful()
    (record,) = caplog.records
    assert record.levelname == "WARNING" and "Etcd revision 40 " in record.getMessage()
    assert "another Etcd cluster (cluster id 9, was 7" in record.getMessage()

    conns.saw_header(_header(30, cluster_id=9))
    conns.saw_header(_header(12, cluster_id=9), transaction=True)
    assert conns.etcd_revision == 12 and not conns._revision_doubtful()
    assert "Etcd revision 30 " in caplog.records[-1].getMessage()
    assert "committed an Apply at revision 12" in caplog.records[-1].getMessage()
    conns.saw_header(_header(13, cluster_id=9), transaction=True)  # moving on: nothing to say
    assert conns.etcd_revision == 13 and len(caplog.records) == 2


def test_a_check_of_the_etcd_revision_that_learns_nothing_asks_for_none_and_is_not_repeated_at_once():
    """When the check before a Read or Append fails (here UNAVAILABLE; a token without the LIST
    capability is refused alike), the call asks for no revision, and so do the calls after it
    without checking again, until a header confirms the revision."""
    import grpc

    class Refused(grpc.RpcError):
        def code(self):
            return grpc.StatusCode.UNAVAILABLE

    lists = []

    class Stub:
        def List(self, request, **kwargs):  # noqa: N802 - the RPC's name
            lists.append(request)
            raise Refused()

    conns = Connections(ClientConfig("http://127.0.0.1:1"))
    conns.stub = lambda endpoint=None: Stub()  # type: ignore[method-assign]
    conns.saw_header(_header(40))
    conns.saw_header(_header(39))
    assert conns.min_etcd_revision("a/journal") == 0 and conns.read_request("a/journal").min_etcd_revision == 0
    (asked,) = lists
    assert asked.watch_resume.etcd.revision == 39 and asked.watch_resume.etcd.cluster_id == 7
    assert [label.value for label in asked.selector.include.labels] == ["a/journal"]
    assert conns.etcd_revision == 40  # not forgotten: nothing was learned
    conns.saw_header(_header(41))
    assert conns.min_etcd_revision("a/journal") == 41 and len(lists) == 1


@pytest.mark.parametrize("ending", ["deadline", "cancelled", "empty"])
def test_a_check_held_to_its_deadline_forgets_the_revision_however_the_call_ends(monkeypatch, caplog, ending):
    """A broker holds the check's List until the revision comes or the call's deadline passes.
    At the deadline the call ends DEADLINE_EXCEEDED, or, when the broker's side of the deadline
    ends it first, CANCELLED or cleanly with no message (docs/protocol.md). Each means the broker did not reach the revision, so the client forgets
    it and warns. CANCELLED or an empty end long before the deadline learns nothing: the
    revision is kept (and no revision asked for)."""
    import logging

    import grpc

    from pyspark_gazette.client import conn

    class Ended(grpc.RpcError):
        def __init__(self, code):
            self._code = code

        def code(self):
            return self._code

    held = {"seconds": 0.0}

    def answer(request, timeout):
        time.sleep(held["seconds"])
        if ending == "deadline":
            raise Ended(grpc.StatusCode.DEADLINE_EXCEEDED)
        if ending == "cancelled":
            raise Ended(grpc.StatusCode.CANCELLED)
        return iter(())

    class Stub:
        def List(self, request, **kwargs):  # noqa: N802 - the RPC's name
            return answer(request, kwargs["timeout"])

    monkeypatch.setattr(conn, "ETCD_CATCH_UP", 0.2)
    conns = Connections(ClientConfig("http://127.0.0.1:1"))
    conns.stub = lambda endpoint=None: Stub()  # type: ignore[method-assign]
    if ending != "deadline":  # ended at once: nothing learned
        conns.saw_header(_header(40))
        conns.saw_header(_header(39))
        assert conns.min_etcd_revision("a/journal") == 0 and conns.etcd_revision == 40
    held["seconds"] = 0.2  # to the deadline
    again = Connections(ClientConfig("http://127.0.0.1:1"))
    again.stub = lambda endpoint=None: Stub()  # type: ignore[method-assign]
    again.saw_header(_header(40))
    again.saw_header(_header(39))
    with caplog.at_level(logging.WARNING, logger="pyspark_gazette.client.conn"):
        assert again.min_etcd_revision("a/journal") == 0
    assert again.etcd_revision == 0
    assert any("no longer asks brokers for Etcd revision 40" in r.getMessage() for r in caplog.records)
