"""Apply and List against the embedded broker, through the raw gRPC stubs."""

from __future__ import annotations

import threading

import grpc
import pytest

from pyspark_gazette.broker import EmbeddedBroker
from pyspark_gazette.protocol import label_set, pb


def change(spec=None, *, rev=0, delete=""):
    if delete:
        return pb.ApplyRequest.Change(expect_mod_revision=rev, delete=delete)
    return pb.ApplyRequest.Change(expect_mod_revision=rev, upsert=spec)


def test_headers_name_this_broker_as_sole_primary(gz):
    resp = gz.apply(change(gz.spec("hdr/journal")))
    h = resp.header
    assert h.process_id.zone == "local" and h.process_id.suffix == gz.broker.process_suffix
    # Apply's header is "unrouted" as Gazette's is: it concerns no single journal.
    assert h.HasField("route") and list(h.route.members) == [] and h.route.primary == -1
    (page,) = gz.list(pb.LabelSelector(include=label_set({"name": "hdr/journal"})))
    assert page.header.route.primary == -1 and list(page.header.route.members) == []
    (listed,) = page.journals
    assert list(listed.route.members) == [h.process_id] and listed.route.primary == 0
    assert list(listed.route.endpoints) == [gz.broker.address]
    assert gz.broker.address.startswith("http://127.0.0.1:")
    assert all([h.etcd.cluster_id, h.etcd.member_id, h.etcd.revision, h.etcd.raft_term])


def test_process_suffix_is_configurable_and_unique_per_instance(make_broker, tmp_path):
    a = make_broker(process_suffix="my-broker")
    assert a.core.headers.process_id.suffix == "my-broker"
    b = EmbeddedBroker(str(tmp_path / "other")).start()
    try:
        assert b.process_suffix != a.process_suffix
        assert b.process_suffix != EmbeddedBroker(str(tmp_path / "third")).process_suffix
    finally:
        b.stop()


def test_apply_mod_revisions_create_update_delete(gz):
    spec = gz.spec("rev/one")
    r1 = gz.apply(change(spec))
    assert r1.status == pb.OK
    rev1 = r1.header.etcd.revision
    # Creating again (expect 0) fails: it exists.
    assert gz.apply(change(spec)).status == pb.ETCD_TRANSACTION_FAILED
    assert gz.mod_revision("rev/one") == rev1
    # Update with a wrong revision fails, with the right one succeeds and bumps the revision.
    assert gz.apply(change(spec, rev=rev1 + 100)).status == pb.ETCD_TRANSACTION_FAILED
    spec.fragment.length = 2048
    r2 = gz.apply(change(spec, rev=rev1))
    assert r2.status == pb.OK and r2.header.etcd.revision > rev1
    listed = gz.list(pb.LabelSelector(include=label_set({"name": "rev/one"})))[0].journals[0]
    assert listed.mod_revision == r2.header.etcd.revision
    assert listed.create_revision == rev1
    assert listed.spec.fragment.length == 2048
    # -1 skips the check.
    r3 = gz.apply(change(spec, rev=-1))
    assert r3.status == pb.OK and r3.header.etcd.revision > r2.header.etcd.revision
    # Delete with a stale revision fails; with the current one succeeds.
    assert gz.apply(change(delete="rev/one", rev=r2.header.etcd.revision)).status == pb.ETCD_TRANSACTION_FAILED
    assert gz.apply(change(delete="rev/one", rev=r3.header.etcd.revision)).status == pb.OK
    assert gz.list()[0].journals == []


def test_apply_is_one_transaction(gz):
    gz.create("txn/existing")
    # One failing compare (txn/existing must not exist) aborts the whole request.
    resp = gz.apply(change(gz.spec("txn/new")), change(gz.spec("txn/existing")))
    assert resp.status == pb.ETCD_TRANSACTION_FAILED
    names = [j.spec.name for j in gz.list()[0].journals]
    assert names == ["txn/existing"]
    rev = gz.mod_revision("txn/existing")
    resp = gz.apply(change(gz.spec("txn/new")), change(delete="txn/existing", rev=rev))
    assert resp.status == pb.OK
    listed = gz.list()[0].journals
    assert [j.spec.name for j in listed] == ["txn/new"]
    assert listed[0].mod_revision == resp.header.etcd.revision


def _invalid_specs(gz):
    def s(**kw):
        spec = gz.spec("valid/name")
        for key, value in kw.items():
            if key == "name":
                spec.name = value
            elif key == "labels":
                spec.labels.CopyFrom(pb.LabelSet(labels=[pb.Label(name=n, value=v) for n, v in value]))
            elif key in ("replication", "flags", "max_append_rate"):
                setattr(spec, key, value)
            elif key == "stores":
                del spec.fragment.stores[:]
                spec.fragment.stores.extend(value)
            elif key in ("refresh_interval", "flush_interval"):
                getattr(spec.fragment, key).seconds = value
            else:
                setattr(spec.fragment, key, value)
        return spec

    return {
        "name too short": (s(name="abc"), "length"),
        "name too long": (s(name="a" * 513), "length"),
        "name bad char": (s(name="bad name!"), "not allowed"),
        "name leading slash": (s(name="/abs/name"), "must not begin"),
        "name not clean": (s(name="a//b/c"), "clean path"),
        "name dot dot": (s(name="a/../b"), "clean path"),
        "name meta suffix": (s(name="abc/def;meta"), "not allowed"),
        "replication 0": (s(replication=0), "replication"),
        "replication 6": (s(replication=6), "replication"),
        "length too small": (s(length=1023), "fragment.length"),
        "length too large": (s(length=(1 << 34) + 1), "fragment.length"),
        "codec invalid": (s(compression_codec=pb.INVALID), "compression_codec"),
        "store without slash": (s(stores=["file:///no/slash"]), "store"),
        "store bad scheme": (s(stores=["ftp://host/path/"]), "store"),
        "refresh 0": (s(refresh_interval=0), "refresh_interval"),
        "refresh > 24h": (s(refresh_interval=24 * 3600 + 1), "refresh_interval"),
        "flush 30s": (s(flush_interval=30), "flush_interval"),
        "flags 3": (s(flags=3), "flags"),
        "negative max rate": (s(max_append_rate=-1), "max_append_rate"),
        "template unsupported": (s(path_postfix_template="{{ .Spool.Nope }}"), "path_postfix_template"),
        "template unterminated": (s(path_postfix_template="date={{ .Name"), "path_postfix_template"),
        "label name meta": (s(labels=[("name", "x")]), "meta-label"),
        "label prefix meta": (s(labels=[("prefix", "x/")]), "meta-label"),
        "labels unsorted": (s(labels=[("b", "1"), ("a", "1")]), "label"),
        "label bad name": (s(labels=[("b a d", "1")]), "label"),
        "content-type twice": (s(labels=[("content-type", "a/b"), ("content-type", "c/d")]), "only one value"),
        "message-type without content-type": (s(labels=[("app.gazette.dev/message-type", "T")]), "requires"),
        "gzod on file store": (s(compression_codec=pb.GZIP_OFFLOAD_DECOMPRESSION), "GZIP_OFFLOAD"),
    }


def test_invalid_specs_are_grpc_errors_naming_the_field(gz):
    for what, (spec, text) in _invalid_specs(gz).items():
        with pytest.raises(grpc.RpcError) as err:
            gz.apply(change(spec))
        assert err.value.code() == grpc.StatusCode.UNKNOWN, what
        assert text in err.value.details(), (what, err.value.details())
    assert gz.list()[0].journals == []


def test_valid_edge_specs_are_accepted(gz):
    edge = gz.spec("edge/" + "x" * 507, length=1 << 34, refresh=24 * 3600, flush=60, flags=4, codec=pb.SNAPPY)
    edge.replication = 5
    edge.max_append_rate = 0
    edge.fragment.path_postfix_template = (
        'date={{ .Spool.FirstAppendTime.Format "2006-01-02" }}/hour={{ .Spool.FirstAppendTime.Format "15" }}'
    )
    assert gz.apply(change(edge)).status == pb.OK
    small = gz.spec("edge/small", length=1024, refresh=1, stores=[])
    small.labels.CopyFrom(label_set({"content-type": "application/x-ndjson", "app.gazette.dev/message-type": "M"}))
    assert gz.apply(change(small)).status == pb.OK


def test_apply_request_shape_errors(gz):
    with pytest.raises(grpc.RpcError) as err:
        gz.apply()
    assert err.value.code() == grpc.StatusCode.UNKNOWN
    with pytest.raises(grpc.RpcError) as err:
        gz.apply(change(delete="some/journal", rev=0))
    assert err.value.code() == grpc.StatusCode.UNKNOWN
    with pytest.raises(grpc.RpcError) as err:
        gz.apply(change(gz.spec("dup/journal")), change(gz.spec("dup/journal")))
    assert err.value.code() == grpc.StatusCode.UNKNOWN


def test_list_pages_of_1000_with_header_first(gz):
    # Gazette v0.103.0 sends at most 1,000 journals in one List response.
    changes = [change(gz.spec(f"page/j{i:04d}", labels={"app.gazette.dev/tag": "p"})) for i in range(2010)]
    assert gz.apply(*changes).status == pb.OK
    resps = gz.list()
    assert [len(r.journals) for r in resps] == [1000, 1000, 10]
    assert resps[0].status == pb.OK and resps[0].HasField("header")
    assert all(not r.HasField("header") for r in resps[1:])
    names = [j.spec.name for r in resps for j in r.journals]
    assert names == sorted(names) and len(names) == 2010
    route = resps[0].journals[0].route
    assert route.primary == 0 and list(route.endpoints) == [gz.broker.address]


def test_list_selectors(gz):
    gz.create("sel/a/one", labels={"app.gazette.dev/tag": ["x", "y"], "content-type": "application/x-ndjson"})
    gz.create("sel/a/two", labels={"app.gazette.dev/tag": "y"})
    gz.create("sel/b/three", labels={"app.gazette.dev/region": "eu"})

    def names(include=(), exclude=()):
        sel = pb.LabelSelector(
            include=pb.LabelSet(labels=[pb.Label(name=n, value=v, prefix=p) for n, v, p in include]),
            exclude=pb.LabelSet(labels=[pb.Label(name=n, value=v, prefix=p) for n, v, p in exclude]),
        )
        return [j.spec.name for r in gz.list(sel) for j in r.journals]

    assert names() == ["sel/a/one", "sel/a/two", "sel/b/three"]
    assert names([("app.gazette.dev/tag", "x", False)]) == ["sel/a/one"]
    assert names([("app.gazette.dev/tag", "", False)]) == ["sel/a/one", "sel/a/two"]
    assert names(exclude=[("app.gazette.dev/tag", "", False)]) == ["sel/b/three"]
    assert names([("name", "sel/a/", True)]) == ["sel/a/one", "sel/a/two"]
    assert names([("prefix", "sel/b/", False)]) == ["sel/b/three"]
    assert names([("name", "sel/a/two", False)]) == ["sel/a/two"]
    # Exact names (a read of named journals): only those, and still every other label's test.
    assert names([("name", "sel/a/one", False), ("name", "sel/b/three", False)]) == ["sel/a/one", "sel/b/three"]
    assert names([("app.gazette.dev/tag", "x", False), ("name", "sel/a/one", False), ("name", "sel/a/two", False)]) == [
        "sel/a/one"
    ]
    assert names([("name", "sel/a/one", False), ("name", "sel/nope", False)], [("content-type", "", False)]) == []
    # A prefix is another value of the meta-label name (as Gazette rewrites it): either matches.
    assert names([("name", "sel/a/two", False), ("prefix", "sel/b/", False)]) == ["sel/a/two", "sel/b/three"]
    assert names([("name", "sel/a/two", False), ("name", "sel/b/", True)]) == ["sel/a/two", "sel/b/three"]
    assert names([("content-type", "application/", True)]) == ["sel/a/one"]
    with pytest.raises(grpc.RpcError) as err:
        names([("prefix", "no-trailing-slash", False)])
    assert err.value.code() == grpc.StatusCode.UNKNOWN


def _watch(gz, selector=None, resume=None):
    """Start a watch; returns (responses list, condition, cancel callable)."""
    call = gz.stub.List(pb.ListRequest(selector=selector, watch=True, watch_resume=resume))
    got: list[pb.ListResponse] = []
    cond = threading.Condition()

    def pump():
        try:
            for resp in call:
                with cond:
                    got.append(resp)
                    cond.notify_all()
        except grpc.RpcError:
            pass

    t = threading.Thread(target=pump, daemon=True)
    t.start()
    return got, cond, call, t


def _snapshots(got):
    """Split watch responses at the empty delimiter messages."""
    out, cur = [], []
    for r in got:
        if r == pb.ListResponse():
            out.append(cur)
            cur = []
        else:
            cur.append(r)
    return out


def _wait_snapshots(got, cond, n):
    with cond:
        assert cond.wait_for(lambda: len(_snapshots(got)) >= n, timeout=20), got
        return _snapshots(got)


def test_watch_sends_snapshot_then_delimiter_and_only_changes(gz):
    gz.create("watch/a/one")
    gz.create("other/journal")
    sel = pb.LabelSelector(include=pb.LabelSet(labels=[pb.Label(name="prefix", value="watch/a/")]))
    got, cond, call, t = _watch(gz, sel)
    snaps = _wait_snapshots(got, cond, 1)
    assert [j.spec.name for j in snaps[0][0].journals] == ["watch/a/one"]
    assert snaps[0][0].HasField("header")
    # A change outside the selector bumps the revision but sends nothing new; one inside does.
    gz.create("other/two")
    gz.create("watch/a/two")
    snaps = _wait_snapshots(got, cond, 2)
    assert [j.spec.name for r in snaps[1] for j in r.journals] == ["watch/a/one", "watch/a/two"]
    assert len(_snapshots(got)) == 2
    assert snaps[1][0].header.etcd.revision > snaps[0][0].header.etcd.revision
    # Updating a matched journal raises its mod revision: a new snapshot.
    spec = gz.spec("watch/a/one", length=4096)
    assert gz.apply(change(spec, rev=-1)).status == pb.OK
    snaps = _wait_snapshots(got, cond, 3)
    assert snaps[2][0].journals[0].spec.fragment.length == 4096
    # Deleting changes the count.
    assert gz.apply(change(delete="watch/a/two", rev=-1)).status == pb.OK
    snaps = _wait_snapshots(got, cond, 4)
    assert [j.spec.name for j in snaps[3][0].journals] == ["watch/a/one"]
    call.cancel()
    t.join(10)
    assert not t.is_alive()


def test_watch_many_journals_splits_snapshot(gz):
    assert gz.apply(*[change(gz.spec(f"many/j{i:04d}")) for i in range(1005)]).status == pb.OK
    got, cond, call, t = _watch(gz)
    snaps = _wait_snapshots(got, cond, 1)
    assert [len(r.journals) for r in snaps[0]] == [1000, 5]
    call.cancel()
    t.join(10)


def test_watch_resume_waits_for_a_newer_revision(gz):
    gz.create("resume/one")
    first = gz.list()[0]
    got, cond, call, t = _watch(gz, resume=first.header)
    # Nothing newer than the resumed header yet: no snapshot until a change.
    gz.create("resume/two")
    snaps = _wait_snapshots(got, cond, 1)
    assert snaps[0][0].header.etcd.revision > first.header.etcd.revision
    assert [j.spec.name for j in snaps[0][0].journals] == ["resume/one", "resume/two"]
    call.cancel()
    t.join(10)


def test_journal_deleted_then_recreated_starts_empty(gz):
    gz.create("recreate/j", stores=[])
    assert gz.append("recreate/j", b"hello").status == pb.OK
    assert gz.apply(change(delete="recreate/j", rev=-1)).status == pb.OK
    assert gz.read("recreate/j")[0].status == pb.JOURNAL_NOT_FOUND
    gz.create("recreate/j", stores=[])
    resp = gz.read("recreate/j")
    assert resp[-1].status == pb.OFFSET_NOT_YET_AVAILABLE and resp[-1].write_head == 0
