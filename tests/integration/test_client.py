"""The journal client over real gRPC on loopback, against both brokers (the ``backend`` fixture):
the embedded broker and a real Gazette v0.103.0 cluster."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import threading

import pytest

import journalspecs
from pyspark_gazette.client import Change, ClientConfig, JournalClient
from pyspark_gazette.client.specs import dump_specs
from pyspark_gazette.errors import (
    EtcdTransactionFailedError,
    InvalidInputError,
    JournalNotFoundError,
    NotAllowedError,
    OffsetNotYetAvailableError,
    RegisterMismatchError,
    SpecRefusedError,
    WrongAppendOffsetError,
)
from pyspark_gazette.protocol import label_set, pb
from pyspark_gazette.protocol.labels import parse_selector
from pyspark_gazette.protocol.specs import spec_problems


def make_spec(name: str, *, store: str = "", length: int = 1 << 20, codec: int = pb.NONE, labels=None, flags: int = 0):
    return journalspecs.make_spec(
        name, store=store, length=length, codec=codec, content_type="", labels=labels, flags=flags
    )


@pytest.fixture
def broker(backend):
    """The embedded broker or a real Gazette cluster (tests/backends.py)."""
    return backend


@pytest.fixture
def client(broker):
    with broker.client() as c:
        yield c


def create(broker, client, *specs):
    """Apply new journals; on real Gazette, their file store directories are made first and the
    call returns once each journal has a primary."""
    broker.prepare(specs)
    rev = client.apply([Change(expect_mod_revision=0, upsert=s) for s in specs])
    broker.wait_primaries([s.name for s in specs])
    return rev


def test_list_consumes_a_stream_of_many_messages_and_selects(client, broker):
    specs = [make_spec(f"many/j{i:03d}", labels={"parity": "even" if i % 2 == 0 else "odd"}) for i in range(60)]
    specs.append(make_spec("other/x", labels={"parity": "even"}))
    client.apply_in_batches([Change(0, upsert=s) for s in specs], size=16)
    assert len(client.list_journals()) == 61
    assert len(client.list_journals("parity=even")) == 31
    assert len(client.list_journals("parity=even,name:prefix=many/")) == 30
    assert [j.name for j in client.list_journals("parity in (odd), name:prefix=many/j00")] == [
        f"many/j00{i}" for i in (1, 3, 5, 7, 9)
    ]
    assert client.list_journals(parse_selector("!parity")) == []
    info = client.get_journal("many/j007")
    assert info.label("parity") == "odd" and info.mod_revision > 0
    with pytest.raises(JournalNotFoundError):
        client.get_journal("many/missing")
    # Several named journals from one List: those that exist, by name (a ;meta suffix stripped).
    got = client.get_journals(["many/j001", "many/j002;pivot=00", "many/missing", "other/x"])
    assert sorted(got) == ["many/j001", "many/j002", "other/x"]
    assert got["many/j002"].label("parity") == "even"
    assert client.get_journals([]) == {}


def test_apply_revisions_updates_and_deletes(client, broker):
    rev = create(broker, client, make_spec("apply/a"))
    with pytest.raises(EtcdTransactionFailedError):
        create(broker, client, make_spec("apply/a"))
    info = client.get_journal("apply/a")
    updated = make_spec("apply/a", codec=pb.ZSTANDARD)
    with pytest.raises(EtcdTransactionFailedError):
        client.apply([Change(expect_mod_revision=info.mod_revision + 100, upsert=updated)])
    rev2 = client.apply([Change(expect_mod_revision=info.mod_revision, upsert=updated)])
    assert rev2 > rev
    assert client.get_journal("apply/a").spec.fragment.compression_codec == pb.ZSTANDARD
    client.apply([Change(expect_mod_revision=-1, delete="apply/a")])
    with pytest.raises(JournalNotFoundError):
        client.get_journal("apply/a")


#: Specs real Gazette's JournalSpec.Validate refuses that our rules (protocol/specs.py) once let
#: through: a negative suspend offset, and store URLs Go's url.Parse refuses but Python's does not.
GO_ONLY_REFUSALS = {
    "gap/suspend": dict(suspend=-1),
    "gap/port": dict(store="s3://bucket:abc/p/"),
    "gap/escape": dict(store="s3://bucket/p%zz/"),
    "gap/host": dict(store="s3://buc ket/p/"),
}


def _gap_spec(name, suspend=0, store=""):
    spec = make_spec(name, store=store)
    if suspend:
        spec.suspend.offset = suspend
    return spec


def test_a_change_the_broker_refuses_is_one_line_naming_the_journal(client, broker, tmp_path):
    """Issue 25: a change the broker refuses is a SpecError (SpecRefusedError) naming the journal and
    the broker's reason, not a 'TransportError: Apply: gRPC UNKNOWN' chain; a stale revision names
    the journal and both revisions, from the client and from `journals apply` (one line)."""
    good, bad = make_spec("apply/good"), make_spec("apply/bad")
    bad.fragment.length = 10  # below 1024
    # The client sends what it is given (the broker validates): the second change is refused and
    # named, Gazette by its index ("Changes[1]..."), the embedded broker by the journal's name.
    with pytest.raises(SpecRefusedError) as ei:
        client.apply([Change(0, upsert=good), Change(0, upsert=bad)])
    assert ei.value.journal == "apply/bad" and "length" in ei.value.details.lower(), str(ei.value)
    assert str(ei.value).startswith("the broker refused the spec of journal 'apply/bad': ")
    assert "\n" not in str(ei.value) and "TransportError" not in str(ei.value)
    assert client.list_journals("name:prefix=apply/") == []  # one transaction: nothing applied

    # Both sides refuse what real Gazette's Validate refuses (the gaps, now closed, were ours).
    for name, kwargs in GO_ONLY_REFUSALS.items():
        spec = _gap_spec(name, **kwargs)
        assert spec_problems(spec), f"our rules let {name} through"
        with pytest.raises(SpecRefusedError) as ei:
            client.apply([Change(0, upsert=spec)])
        assert ei.value.journal == name, str(ei.value)

    # A stale revision: the journal exists, the change expects it not to (or an old revision).
    create(broker, client, good)
    rev = client.get_journal("apply/good").mod_revision
    with pytest.raises(EtcdTransactionFailedError) as ei:
        client.apply([Change(rev - 1, upsert=good)])
    assert f"journal 'apply/good' is at revision {rev}, the change expected revision {rev - 1}" in str(ei.value)
    specs = tmp_path / "specs.yaml"
    specs.write_text(dump_specs([(good, 0)]))  # no revision: create
    out = subprocess.run(
        [sys.executable, "-m", "pyspark_gazette.cli", "journals", "apply", "-f", str(specs)],
        env={**os.environ, "BROKER_ADDRESS": broker.address},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 1 and out.stdout == "", out
    assert out.stderr.splitlines() == [
        f"error: ETCD_TRANSACTION_FAILED: journal 'apply/good' is at revision {rev}, "
        "the change expected it not to exist (created, changed or deleted since)"
    ], out.stderr


def test_append_then_read_ranges_and_write_head(client, broker):
    create(broker, client, make_spec("rw/a"))
    c1 = client.append("rw/a", b"hello\n")
    c2 = client.append("rw/a", b"gazette\n")
    assert (c1.begin, c1.end, c2.begin, c2.end) == (0, 6, 6, 14)
    import hashlib

    from pyspark_gazette.protocol import sha1sum_to_digest

    assert sha1sum_to_digest(c2.sum) == hashlib.sha1(b"gazette\n").digest()  # this append's content only
    assert client.read_all("rw/a") == b"hello\ngazette\n"
    assert client.read_all("rw/a", 6) == b"gazette\n"
    assert client.read_all("rw/a", 2, 9) == b"llo\ngaz"
    with client.reader("rw/a", 0, metadata_only=True) as r:
        assert r.read() == b""
        # Where fragments end is the broker's choice: real Gazette may close one between appends.
        assert r.write_head == 14 and r.fragment.begin == 0 and r.fragment.end in (6, 14)


def test_non_blocking_read_at_head_and_blocking_read_woken_by_append(client, broker):
    create(broker, client, make_spec("rw/b"))
    client.append("rw/b", b"one\n")
    with client.retry_reader("rw/b", 0) as r:
        assert r.read() == b"one\n"
        with pytest.raises(OffsetNotYetAvailableError):
            r.read()
    got: list[bytes] = []
    # From the write head the first read reached (4), not -1: a blocking read of -1 resolves the
    # head when the broker gets it, which may be after the append below.
    with client.retry_reader("rw/b", 4, block=True) as r:
        started = threading.Event()

        def read_one():
            started.set()
            got.append(r.read())

        t = threading.Thread(target=read_one)
        t.start()
        started.wait()
        client.append("rw/b", b"two\n")
        t.join(timeout=30)
    assert got == [b"two\n"]


def test_registers_check_union_subtract_and_mismatch(client, broker):
    create(broker, client, make_spec("reg/a"))
    # Empty registers match any check.
    client.append(
        "reg/a", b"x\n", check_registers=parse_selector("owner=alpha"), union_registers=label_set({"owner": "alpha"})
    )
    with pytest.raises(RegisterMismatchError) as ei:
        client.append("reg/a", b"y\n", check_registers=parse_selector("owner=beta"))
    assert [(lb.name, lb.value) for lb in ei.value.registers.labels] == [("owner", "alpha")]
    app = client.appender(
        "reg/a", check_registers=parse_selector("owner=alpha"), union_registers=label_set({"owner": "beta"})
    )
    app.write(b"z\n")
    app.close()
    assert [(lb.name, lb.value) for lb in app.response.registers.labels] == [("owner", "beta")]
    app = client.appender("reg/a", subtract_registers=label_set({"owner": "beta"}))
    app.write(b"w\n")
    app.close()
    assert list(app.response.registers.labels) == []
    assert client.read_all("reg/a") == b"x\nz\nw\n"  # the mismatched append left nothing


def test_explicit_offset_and_abort(client, broker):
    create(broker, client, make_spec("off/a"))
    client.append("off/a", b"abc")
    with pytest.raises(WrongAppendOffsetError):
        client.append("off/a", b"def", offset=1)
    client.append("off/a", b"def", offset=3)
    app = client.appender("off/a")
    app.write(b"never visible")
    app.abort()
    assert client.read_all("off/a") == b"abcdef"
    assert client.append("off/a", b"g").begin == 6


def test_read_only_journal_refuses_appends(client, broker):
    create(broker, client, make_spec("ro/a", flags=pb.JournalSpec.O_RDONLY))
    with pytest.raises(NotAllowedError):
        client.append("ro/a", b"nope")


def test_append_service_coalesces_orders_and_rolls_back_one_writer(client, broker):
    create(broker, client, make_spec("svc/a"), make_spec("svc/b"))
    svc = client.append_service
    n_threads, per_thread = 4, 250
    barrier = threading.Barrier(n_threads)

    def writer(k: int):
        barrier.wait()
        for i in range(per_thread):
            aa = svc.start_append("svc/a")
            try:
                aa.write(f"{k}:{i}\n".encode())
                if i % 50 == 49:
                    aa.write(b"half a message that is rolled back")
                    raise RuntimeError("writer fails mid-message")
            except RuntimeError:
                aa.rollback()
                continue
            aa.release()

    threads = [threading.Thread(target=writer, args=(k,)) for k in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    svc.flush()
    lines = client.read_all("svc/a").decode().splitlines()
    expected = {f"{k}:{i}" for k in range(n_threads) for i in range(per_thread) if i % 50 != 49}
    assert len(lines) == len(expected) and set(lines) == expected
    for k in range(n_threads):  # each writer's messages stay in its order
        mine = [int(x.split(":")[1]) for x in lines if x.startswith(f"{k}:")]
        assert mine == sorted(mine)
    assert svc.rpcs < len(expected) / 4  # many writes per RPC
    # Dependencies: b's append is sent only after a's.
    first = svc.append("svc/a", b"first\n")
    second = svc.append("svc/b", b"second\n", dependencies=[first])
    assert second.wait(30).begin == 0 and first.done()


def test_append_service_terminal_error_fails_later_appends(client, broker):
    svc = client.append_service
    aa = svc.append("svc/missing", b"x\n")
    with pytest.raises(JournalNotFoundError):
        aa.wait(30)
    with pytest.raises(JournalNotFoundError):
        svc.start_append("svc/missing")


def test_list_fragments_pages_and_mod_time_filters(client, broker):
    create(broker, client, make_spec("frag/a", store="file:///frags/", length=1024))
    for i in range(12):
        client.append("frag/a", bytes([65 + i]) * 1500)  # each append rolls the previous fragment
    frags = client.list_fragments("frag/a", page_limit=5)
    assert [(f.spec.begin, f.spec.end) for f in frags] == [(i * 1500, (i + 1) * 1500) for i in range(12)]
    # start: the fragments beginning at or after an offset (the page token is a begin offset).
    assert [f.spec.begin for f in client.list_fragments("frag/a", start=7 * 1500, page_limit=2)] == [
        i * 1500 for i in range(7, 12)
    ]
    assert broker.wait_persisted()
    listed = client.list_fragments("frag/a")
    persisted = [f for f in listed if f.spec.mod_time]
    assert len(persisted) == 11 and listed[-1].spec.mod_time == 0  # the open spool is local
    assert all(f.spec.backing_store == "file:///frags/" for f in persisted)
    newest = max(f.spec.mod_time for f in persisted)
    # end_mod_time drops unpersisted fragments and keeps mod_time == end_mod_time (inclusive).
    assert [f.spec.begin for f in client.list_fragments("frag/a", end_mod_time=newest)] == [
        f.spec.begin for f in persisted
    ]
    assert [f.spec.begin for f in client.list_fragments("frag/a", begin_mod_time=newest + 1)] == [11 * 1500]
    signed = client.list_fragments("frag/a", signature_ttl=60)
    assert all(f.signed_url.startswith("file:///frags/frag/a/") for f in signed if f.spec.mod_time)
    assert all(f.signed_url == "" for f in signed if not f.spec.mod_time)


def _rolled_journal(client, broker, name, *, store="file:///direct/", codec=pb.ZSTANDARD, n=6, size=3000):
    """``n`` appends of ``size`` bytes to a journal with 1 KiB fragments: each append rolls the
    previous fragment, so all but the last are persisted to ``store``."""
    create(broker, client, make_spec(name, store=store, length=1024, codec=codec))
    parts = [f"{i:04d}".encode() * (size // 4) for i in range(n)]
    for part in parts:
        client.append(name, part)
    assert broker.wait_persisted()
    return b"".join(parts)


@pytest.mark.parametrize("codec", [pb.NONE, pb.GZIP, pb.ZSTANDARD, pb.SNAPPY])
def test_direct_reads_of_persisted_fragments_under_a_file_root(client, broker, codec):
    content = _rolled_journal(client, broker, "direct/a", codec=codec)
    with client.retry_reader("direct/a", 0, end_offset=len(content)) as r:
        got = b"".join(iter(r.read, b""))
        direct = r.direct_bytes
    assert got == content
    assert direct == 5 * 3000  # five persisted fragments straight from the store, the tail via the broker


def test_file_urls_without_a_file_root_are_read_through_the_broker(broker, tmp_path):
    with JournalClient(ClientConfig(broker.address)) as c:  # direct_reads on, but no file_root
        content = _rolled_journal(c, broker, "direct/b")
        with c.retry_reader("direct/b", 0, end_offset=len(content), do_not_proxy=True) as r:
            got = b"".join(iter(r.read, b""))
            assert r.direct_bytes == 0
    assert got == content


def test_reads_from_an_offset_inside_a_persisted_fragment(client, broker):
    content = _rolled_journal(client, broker, "direct/c")
    with client.retry_reader("direct/c", 4500, end_offset=10_000) as r:
        assert b"".join(iter(r.read, b"")) == content[4500:10_000]
        assert r.direct_bytes > 0


def test_offset_jump_over_a_pruned_journal_start(client, broker, tmp_path):
    content = _rolled_journal(client, broker, "jump/a", store="file:///jump/")
    first = client.list_fragments("jump/a")[0].spec
    from pyspark_gazette.fragments import FragmentRef

    ref = FragmentRef.from_proto(first)
    (pathlib.Path(broker.file_root) / "jump" / ref.content_path).unlink()  # retention pruned the journal's start
    broker.refresh("jump/a")
    from pyspark_gazette.errors import OffsetJumpError

    with client.retry_reader("jump/a", 0, end_offset=len(content)) as r:
        with pytest.raises(OffsetJumpError) as ei:
            r.read()
        assert (ei.value.from_offset, ei.value.to_offset) == (0, ref.end)
        assert b"".join(iter(r.read, b"")) == content[ref.end :]  # the reader stays valid


def test_retry_reader_survives_a_broker_restart(tmp_path):
    import socket

    from pyspark_gazette.broker import EmbeddedBroker

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kwargs = dict(port=port, file_root=str(tmp_path / "store"))
    broker = EmbeddedBroker(str(tmp_path / "b"), **kwargs).start()
    try:
        with JournalClient(broker.address) as c:
            c.apply([Change(expect_mod_revision=0, upsert=make_spec("restart/a"))])
            c.append("restart/a", b"before\n")
            with c.retry_reader("restart/a", 0, block=True) as r:
                assert r.read() == b"before\n"
                broker.stop()
                broker = EmbeddedBroker(str(tmp_path / "b"), **kwargs).start()
                c.append("restart/a", b"after\n")  # retried until the broker is back
                assert r.read() == b"after\n"
    finally:
        broker.stop()


def test_direct_reads_from_s3_through_presigned_urls(client, broker, s3_server, s3_bucket):
    # Gazette's S3 store takes a custom endpoint (and then uses path-style addressing) and a region.
    store = f"s3://{s3_bucket}/gazette/?endpoint={s3_server}&region=us-east-1"
    content = _rolled_journal(client, broker, "s3/a", store=store, codec=pb.GZIP)
    urls = [f.signed_url for f in client.list_fragments("s3/a", signature_ttl=60) if f.spec.mod_time]
    assert len(urls) == 5 and all(u.startswith(s3_server) and "Signature" in u for u in urls)
    with client.retry_reader("s3/a", 0, end_offset=len(content)) as r:
        got = b"".join(iter(r.read, b""))
        assert r.direct_bytes == 5 * 3000
    assert got == content
    # The same bytes proxied by the broker.
    with client.retry_reader("s3/a", 0, end_offset=len(content), do_not_proxy=False) as r:
        assert b"".join(iter(r.read, b"")) == content and r.direct_bytes == 0


@pytest.mark.slow
def test_list_and_watch_over_a_thousand_journals(client, broker):
    """1,200 journals: the listing arrives split over several List responses on both brokers
    (v0.103.0 and the embedded broker send at most 1,000 journals a response, Gazette's main 25),
    the client joins them, and a watch yields the full snapshot, then a new one on a change."""
    import grpc

    import realgazette
    from pyspark_gazette.protocol import pb_grpc

    specs = [make_spec(f"thousand/j{i:04d}", labels={"group": "thousand"}) for i in range(1200)]
    broker.prepare(specs)
    client.apply_in_batches([Change(0, upsert=s) for s in specs])
    assert len(client.list_journals("group=thousand")) == 1200
    with grpc.insecure_channel(broker.address.removeprefix("http://")) as ch:
        responses = list(pb_grpc.JournalStub(ch).List(pb.ListRequest(selector=parse_selector("group=thousand"))))
    per = realgazette.LIST_JOURNALS_PER_RESPONSE if broker.is_gazette else 1000
    assert [len(r.journals) for r in responses] == [per] * (1200 // per) + ([1200 % per] if 1200 % per else [])
    watch = client.watch_journals("group=thousand")
    try:
        first = next(watch)
        assert len(first) == 1200
        client.apply([Change(0, upsert=make_spec("thousand/late", labels={"group": "thousand"}))])
        second = next(watch)
        while len(second) == 1200:  # a broker may re-send an unchanged snapshot (e.g. new routes)
            second = next(watch)
        assert len(second) == 1201 and "thousand/late" in {j.name for j in second}
    finally:
        watch.close()


def test_a_list_watch_keeps_the_latest_listing(client, broker):
    """``JournalListWatch``: the latest snapshot of a selector's journals, kept by a List watch on
    a thread of its own, follows a create and a delete; a selector of several names selects
    exactly those journals; closed, it has no listing and its thread has ended."""
    specs = [make_spec(f"lw/j{i}", labels={"group": "lw"}) for i in range(3)]
    create(broker, client, *specs)

    def names(listing) -> set[str]:
        return {j.name for j in listing}

    watch = client.list_watch("group=lw")
    try:
        assert names(watch.wait(lambda got: len(got) == 3, 30)) == {"lw/j0", "lw/j1", "lw/j2"}
        create(broker, client, make_spec("lw/late", labels={"group": "lw"}))
        assert "lw/late" in names(watch.wait(lambda got: len(got) == 4, 30))
        gone = next(j for j in client.list_journals("group=lw") if j.name == "lw/j0")
        client.apply([Change(expect_mod_revision=gone.mod_revision, delete="lw/j0")])
        assert names(watch.wait(lambda got: "lw/j0" not in names(got), 30)) == {"lw/j1", "lw/j2", "lw/late"}
        assert watch.listing() is not None
    finally:
        watch.close()
    assert watch.listing() is None and not watch._thread.is_alive()
    by_name = pb.LabelSelector(
        include=pb.LabelSet(labels=[pb.Label(name="name", value=n) for n in ("lw/j2", "lw/late")])
    )
    with client.list_watch(by_name) as named:
        assert names(named.wait(bool, 30)) == {"lw/j2", "lw/late"}


def test_a_list_watch_opens_again_after_its_broker_restarts(make_broker):
    """A List watch whose broker stops has no listing while it is down (callers List then, and
    see the outage), and a fresh one once a broker answers on the address again."""
    from pyspark_gazette.broker import EmbeddedBroker

    first = make_broker()
    port = int(first.address.rsplit(":", 1)[1])
    with JournalClient(ClientConfig(first.address, timeout=5)) as c:
        c.apply([Change(0, upsert=make_spec("lwr/a", labels={"group": "lwr"}))])
        with c.list_watch("group=lwr") as watch:
            assert len(watch.wait(bool, 30)) == 1
            first.stop(grace=0)
            stopped = watch._cond
            with stopped:
                assert stopped.wait_for(lambda: watch._listing is None, 30), "a stopped broker's listing was kept"
            second = make_broker(port=port)
            assert isinstance(second, EmbeddedBroker)
            c.apply([Change(0, upsert=make_spec("lwr/b", labels={"group": "lwr"}))])
            assert {j.name for j in watch.wait(lambda got: len(got) == 2, 60)} == {"lwr/a", "lwr/b"}


def test_reads_and_appends_ask_for_the_etcd_revision_the_client_saw(client, broker):
    """The client sends the largest Etcd revision of the response headers it saw (here Apply's,
    then List's and Append's) as ``min_etcd_revision`` of its Reads and Appends. Gazette's main
    waits until its view of Etcd reaches it, so a revision no broker has reached holds the call
    until its deadline; v0.103.0, Flow's pin and the embedded broker ignore the field (an older
    Go broker drops a field it does not know), and answer at once."""
    import grpc

    import realgazette
    from pyspark_gazette.client.appender import append_request
    from pyspark_gazette.protocol import pb_grpc

    applied = create(broker, client, make_spec("rev/a"))
    assert client.conns.etcd_revision >= applied > 0
    client.append("rev/a", b"one\n")
    seen = client.conns.etcd_revision
    assert seen >= client.get_journal("rev/a").mod_revision
    with client.retry_reader("rev/a", 0, end_offset=4) as r:
        assert r.reader.request.min_etcd_revision == client.conns.etcd_revision >= seen
        assert r.read() == b"one\n"

    def outcome(call) -> str:
        try:
            return "ok" if call().status == pb.OK else "status"
        except grpc.RpcError as e:
            return e.code().name

    def calls(revision: int) -> list[str]:
        """A Read and an Append asking for ``revision``, each with a 2 s deadline: what they got."""
        with grpc.insecure_channel(client.conns.append_endpoint("rev/a").removeprefix("http://")) as ch:
            stub = pb_grpc.JournalStub(ch)
            read = pb.ReadRequest(journal="rev/a", offset=0, end_offset=4, min_etcd_revision=revision)
            append = [append_request("rev/a", min_etcd_revision=revision), pb.AppendRequest(content=b"two\n")]
            return [
                outcome(lambda: list(stub.Read(read, timeout=2))[-1]),
                outcome(lambda: stub.Append(iter([*append, pb.AppendRequest()]), timeout=2)),
            ]

    assert calls(client.conns.etcd_revision) == ["ok", "ok"]
    waits = broker.is_gazette and realgazette.HONOURS_MIN_ETCD_REVISION
    held = calls(client.conns.etcd_revision + 100_000)
    if waits:
        # Held until the deadline. Which side ends the call first decides its code: the client's
        # own deadline (DEADLINE_EXCEEDED) or the broker's context, cancelled by that deadline,
        # which Gazette's main reports as CANCELLED.
        assert set(held) <= {"DEADLINE_EXCEEDED", "CANCELLED"}, held
    else:
        assert held == ["ok", "ok"]


def test_fragment_store_health_of_a_file_store(client, broker):
    """FragmentStoreHealth of a ``file://`` store whose directory exists under the file root is
    OK on both brokers."""
    import grpc

    from pyspark_gazette.protocol import pb_grpc

    spec = make_spec("health/a", store="file:///health/")
    create(broker, client, spec)
    with grpc.insecure_channel(broker.address.removeprefix("http://")) as ch:
        stub = pb_grpc.JournalStub(ch)
        resp = stub.FragmentStoreHealth(pb.FragmentStoreHealthRequest(fragment_store="file:///health/"), timeout=60)
    assert resp.status == pb.OK and resp.store_health_error == ""


def test_a_stalled_append_is_aborted_at_the_minimum_rate(broker):
    """The journal's primary gives an appender one second of credit, then requires the minimum
    rate (64 KiB/s by default): an append that stalls after 100 bytes is rolled back with
    Gazette's error, and none of it becomes visible. (Sent to a broker that proxies it to the
    primary, Gazette's proxy keeps waiting for the client's next chunk: the stall is not
    answered until the client sends again or its deadline passes. Our appenders send to the
    primary, as the route says.)"""
    import grpc

    from pyspark_gazette.protocol import pb, pb_grpc

    with broker.client() as client:
        create(broker, client, make_spec("rate/stalled"))
        client.append("rate/stalled", b"before\n")
        (listed,) = [j for j in client.list_journals() if j.name == "rate/stalled"]
    primary = listed.route.endpoints[listed.route.primary]
    stalled = threading.Event()

    def requests():
        yield pb.AppendRequest(journal="rate/stalled")
        yield pb.AppendRequest(content=b"x" * 100)
        stalled.wait(60)  # never sends the rest

    with grpc.insecure_channel(primary.removeprefix("http://")) as channel:
        try:
            with pytest.raises(grpc.RpcError) as info:
                pb_grpc.JournalStub(channel).Append(requests(), timeout=50)
        finally:
            stalled.set()
    assert info.value.code() == grpc.StatusCode.UNKNOWN
    assert info.value.details() == "append stream: client stream didn't sustain the minimum append data rate"
    with broker.client() as client:
        assert client.read_all("rate/stalled") == b"before\n"
        assert client.append("rate/stalled", b"after\n").begin == len(b"before\n")


def test_append_refuses_content_that_leaves_a_line_message_open(client, broker):
    """On a journal framed one message per line, content without a final newline would glue the
    next append's first message onto its last: refused before anything is sent, naming the
    journal; ``whole_messages=False`` appends it as given; other framings are not checked."""
    import io

    create(
        broker,
        client,
        make_spec("whole/ndjson", labels={"content-type": "application/x-ndjson"}),
        make_spec("whole/fixed", labels={"content-type": "application/x-protobuf-fixed"}),
        make_spec("whole/none"),
    )
    client.append("whole/ndjson", b'{"a":1}\n')
    for content in (b'{"a":2}', io.BytesIO(b'{"a":2}\n{"a":3}')):
        with pytest.raises(InvalidInputError, match="'whole/ndjson'.*does not end with a newline"):
            client.append("whole/ndjson", content)
    assert client.read_all("whole/ndjson") == b'{"a":1}\n'  # nothing was appended
    client.append("whole/ndjson", b'{"a":', whole_messages=False)
    client.append("whole/ndjson", b"2}\n", whole_messages=False)
    assert client.read_all("whole/ndjson") == b'{"a":1}\n{"a":2}\n'
    for name in ("whole/fixed", "whole/none"):
        assert client.append(name, b"\x00no-newline").end == len(b"\x00no-newline")
