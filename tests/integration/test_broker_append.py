"""Append RPC rules (facts sheet 3.2) through raw stubs, including shapes no client sends."""

from __future__ import annotations

import hashlib
import io
import threading
import time

import grpc
import pytest

from journalspecs import make_spec
from pyspark_gazette.fragments import FragmentRef, FragmentStore, compress_bytes
from pyspark_gazette.protocol import label_set, pb, pb_grpc, sha1sum_to_hex


def regs(**kv):
    return label_set({k.replace("_", "-"): v for k, v in kv.items()})


def sel(include=None, exclude=None):
    return pb.LabelSelector(include=label_set(include or {}), exclude=label_set(exclude or {}))


def rpc_error(fn, *args, **kwargs) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        fn(*args, **kwargs)
    return err.value


def test_commit_describes_this_append_only(gz):
    j = gz.create(codec=pb.GZIP).name
    r1 = gz.append(j, b"hello ", b"world")
    assert r1.status == pb.OK
    c = r1.commit
    assert (c.journal, c.begin, c.end) == (j, 0, 11)
    assert sha1sum_to_hex(c.sum) == hashlib.sha1(b"hello world").hexdigest()
    assert c.compression_codec == pb.GZIP
    assert not c.backing_store and c.mod_time == 0 and not c.path_postfix
    assert r1.total_chunks == 2 and r1.delayed_chunks == 0
    assert r1.header.route.primary == 0 and r1.header.etcd.revision > 0
    r2 = gz.append(j, b"again")
    assert (r2.commit.begin, r2.commit.end) == (11, 16)
    assert sha1sum_to_hex(r2.commit.sum) == hashlib.sha1(b"again").hexdigest()
    assert gz.content(j) == b"hello worldagain"


def test_zero_byte_append_is_a_legal_barrier(gz):
    j = gz.create().name
    gz.append(j, b"abc")
    r = gz.append(j)
    assert r.status == pb.OK and (r.commit.begin, r.commit.end) == (3, 3)
    assert sha1sum_to_hex(r.commit.sum) == hashlib.sha1(b"").hexdigest()
    assert r.total_chunks == 0


def test_meta_suffix_is_ignored(gz):
    j = gz.create().name
    assert gz.append(j + ";meta", b"x").status == pb.OK
    assert gz.content(j + ";meta") == b"x"


def test_journal_not_found(gz):
    r = gz.append("no/such/journal", b"x")
    assert r.status == pb.JOURNAL_NOT_FOUND and r.header.etcd.revision > 0


def test_content_on_first_message_is_an_error(gz):
    j = gz.create().name
    err = rpc_error(gz.append_msgs, [pb.AppendRequest(journal=j, content=b"early"), pb.AppendRequest()])
    assert err.code() == grpc.StatusCode.UNKNOWN
    assert "first" in err.details()
    assert gz.content(j) == b""


def test_first_message_without_journal_is_an_error(gz):
    err = rpc_error(gz.append_msgs, [pb.AppendRequest(offset=3), pb.AppendRequest()])
    assert err.code() == grpc.StatusCode.UNKNOWN


@pytest.mark.parametrize(
    "bad_chunk",
    [
        pb.AppendRequest(journal="x/y/z", content=b"data"),
        pb.AppendRequest(offset=5, content=b"data"),
        pb.AppendRequest(do_not_proxy=True),
        pb.AppendRequest(union_registers=label_set({"aa": "b"})),
    ],
    ids=["journal", "offset", "do_not_proxy", "registers"],
)
def test_non_content_fields_on_a_chunk_are_an_error(gz, bad_chunk):
    j = gz.create().name
    msgs = [pb.AppendRequest(journal=j), pb.AppendRequest(content=b"good"), bad_chunk, pb.AppendRequest()]
    err = rpc_error(gz.append_msgs, msgs)
    assert err.code() == grpc.StatusCode.UNKNOWN
    assert "expected Content chunk" in err.details()
    assert gz.content(j) == b""  # the append was rolled back
    assert gz.append(j, b"next").commit.begin == 0


def test_messages_after_the_commit_are_an_error(gz):
    j = gz.create().name
    msgs = [
        pb.AppendRequest(journal=j),
        pb.AppendRequest(content=b"data"),
        pb.AppendRequest(),
        pb.AppendRequest(content=b"more"),
    ]
    err = rpc_error(gz.append_msgs, msgs)
    assert err.code() == grpc.StatusCode.UNKNOWN
    assert gz.content(j) == b""
    msgs[-1] = pb.AppendRequest()  # even a second empty message
    assert rpc_error(gz.append_msgs, msgs).code() == grpc.StatusCode.UNKNOWN
    assert gz.content(j) == b""


def test_eof_without_commit_rolls_back(gz):
    j = gz.create().name
    gz.append(j, b"kept")
    err = rpc_error(gz.append_msgs, [pb.AppendRequest(journal=j), pb.AppendRequest(content=b"lost" * 1000)])
    assert err.code() == grpc.StatusCode.ABORTED
    assert gz.content(j) == b"kept"
    assert gz.read(j, -1, block=False)[-1].write_head == 4
    r = gz.append(j, b"!")
    assert (r.commit.begin, r.commit.end) == (4, 5)
    assert gz.content(j) == b"kept!"


def test_client_cancel_mid_stream_rolls_back(gz):
    j = gz.create().name
    sent = threading.Event()
    release = threading.Event()

    def gen():
        yield pb.AppendRequest(journal=j)
        yield pb.AppendRequest(content=b"partial")
        sent.set()
        release.wait(10)

    fut = gz.stub.Append.future(gen())
    assert sent.wait(10)
    fut.cancel()
    release.set()
    r = gz.append(j, b"after")
    assert (r.commit.begin, r.commit.end) == (0, 5)
    assert gz.content(j) == b"after"


def test_registers_union_subtract_and_check(gz):
    j = gz.create().name
    r = gz.append(j, b"a", union_registers=label_set({"owner": "alice", "epoch": "1"}))
    assert r.registers == label_set({"owner": "alice", "epoch": "1"})
    # Union replaces every value of the same name.
    r = gz.append(j, b"b", union_registers=label_set({"epoch": "2"}))
    assert r.registers == label_set({"owner": "alice", "epoch": "2"})
    # Subtract removes exact (name, value) matches only, before the union.
    r = gz.append(j, b"c", subtract_registers=label_set({"owner": "bob"}))
    assert r.registers == label_set({"owner": "alice", "epoch": "2"})
    r = gz.append(
        j, b"d", subtract_registers=label_set({"owner": "alice"}), union_registers=label_set({"owner": "carol"})
    )
    assert r.registers == label_set({"owner": "carol", "epoch": "2"})
    # A matching check passes; a mismatch returns the current registers and appends nothing.
    assert gz.append(j, b"e", check_registers=sel({"owner": "carol"})).status == pb.OK
    r = gz.append(j, b"f", check_registers=sel({"owner": "alice"}))
    assert r.status == pb.REGISTER_MISMATCH
    assert r.registers == label_set({"owner": "carol", "epoch": "2"})
    r = gz.append(j, b"g", check_registers=sel(exclude={"epoch": "2"}))
    assert r.status == pb.REGISTER_MISMATCH
    assert gz.content(j) == b"abcde"


def test_empty_registers_match_any_check(gz):
    j = gz.create().name
    r = gz.append(j, b"x", check_registers=sel({"owner": "nobody"}), union_registers=label_set({"owner": "me"}))
    assert r.status == pb.OK and r.registers == label_set({"owner": "me"})


def test_register_change_needs_content(gz):
    j = gz.create().name
    for field in ("union_registers", "subtract_registers"):
        msgs = [pb.AppendRequest(journal=j, **{field: label_set({"aa": "b"})}), pb.AppendRequest()]
        err = rpc_error(gz.append_msgs, msgs)
        assert err.code() == grpc.StatusCode.UNKNOWN
        assert "register modification requires non-empty Append" in err.details()
    assert gz.append(j, b"x").registers == pb.LabelSet()


def test_invalid_register_sets_are_rejected(gz):
    j = gz.create().name
    bad = pb.LabelSet(labels=[pb.Label(name="bb", value="1"), pb.Label(name="aa", value="1")])
    err = rpc_error(gz.append, j, b"x", union_registers=bad)
    assert err.code() == grpc.StatusCode.UNKNOWN


def test_explicit_offsets(gz):
    j = gz.create().name
    assert gz.append(j, b"12345").commit.end == 5
    assert gz.append(j, b"x", offset=3).status == pb.WRONG_APPEND_OFFSET
    assert gz.append(j, b"x", offset=6).status == pb.WRONG_APPEND_OFFSET
    r = gz.append(j, b"678", offset=5)
    assert r.status == pb.OK and (r.commit.begin, r.commit.end) == (5, 8)
    assert gz.content(j) == b"12345678"


def test_read_only_and_write_only_journals(gz):
    ro = gz.create(flags=1).name
    assert gz.append(ro, b"nope").status == pb.NOT_ALLOWED
    assert gz.append(ro).status == pb.OK  # a zero-byte append carries no content
    wo = gz.create(flags=2).name
    assert gz.append(wo, b"fine").status == pb.OK
    resp = gz.read(wo)
    assert len(resp) == 1 and resp[0].status == pb.NOT_ALLOWED and resp[0].HasField("header")


def test_suspend_modes(gz):
    """Suspension as Gazette's append FSM does it (broker/append_fsm.go): an empty fragment index
    is suspended FULL, a written one PARTIAL (SUSPEND_NOW, or SUSPEND_IF_FLUSHED once idle);
    appends that ask to suspend carry no content; RESUME (the default) resumes at the offset."""

    def current(j: str) -> pb.JournalSpec:
        return gz.list(pb.LabelSelector(include=label_set({"name": j})))[0].journals[0].spec

    def level(j: str) -> int:
        return current(j).suspend.level

    j = gz.create().name
    assert gz.append(j, b"x", suspend=pb.AppendRequest.SUSPEND_KEEP).status == pb.NOT_ALLOWED
    assert gz.append(j, suspend=pb.AppendRequest.SUSPEND_KEEP).status == pb.OK
    assert gz.append(j, b"x", suspend=pb.AppendRequest.SUSPEND_NO_RESUME).status == pb.OK
    # In use (written within its flush interval): IF_FLUSHED leaves it; content is refused.
    assert gz.append(j, suspend=pb.AppendRequest.SUSPEND_IF_FLUSHED).status == pb.OK
    assert gz.append(j, b"y", suspend=pb.AppendRequest.SUSPEND_IF_FLUSHED).status == pb.NOT_ALLOWED
    assert level(j) == pb.JournalSpec.Suspend.NONE
    # NOW: partially suspended at its head; it still serves reads; NO_RESUME is refused.
    assert gz.append(j, suspend=pb.AppendRequest.SUSPEND_NOW).status == pb.SUSPENDED
    assert (level(j), current(j).suspend.offset) == (pb.JournalSpec.Suspend.PARTIAL, 1)
    assert b"".join(r.content for r in gz.read(j)) == b"x"
    assert gz.append(j, b"y", suspend=pb.AppendRequest.SUSPEND_NO_RESUME).status == pb.SUSPENDED
    assert gz.append(j, suspend=pb.AppendRequest.SUSPEND_NOW).status == pb.SUSPENDED
    assert gz.append(j, b"y").commit.begin == 1  # resumed
    assert (level(j), current(j).suspend.offset) == (pb.JournalSpec.Suspend.NONE, 1)
    # An empty journal is fully suspended: reads and listings answer SUSPENDED until resumed.
    e = gz.create().name
    assert gz.append(e, b"z", suspend=pb.AppendRequest.SUSPEND_NOW).status == pb.SUSPENDED
    assert level(e) == pb.JournalSpec.Suspend.FULL
    assert gz.read(e)[0].status == pb.SUSPENDED
    assert gz.stub.ListFragments(pb.FragmentsRequest(journal=e)).status == pb.SUSPENDED
    assert gz.append(e, b"z", suspend=pb.AppendRequest.SUSPEND_NO_RESUME).status == pb.SUSPENDED
    assert gz.append(e, b"z").commit.begin == 0
    assert level(e) == pb.JournalSpec.Suspend.NONE
    # A journal fully suspended at offset 5 (its fragments pruned) resumes there: offsets never
    # restart.
    f = gz.create().name
    spec = current(f)
    spec.suspend.level, spec.suspend.offset = pb.JournalSpec.Suspend.FULL, 5
    assert gz.apply(pb.ApplyRequest.Change(expect_mod_revision=-1, upsert=spec)).status == pb.OK
    assert gz.append(f, b"w").commit.begin == 5


def test_index_has_greater_offset_when_a_foreign_fragment_is_ahead(gz):
    j = gz.create(codec=pb.NONE).name
    assert gz.append(j, b"0123456789").commit.end == 10
    # Another process writes [10, 20) straight into the store.
    content = b"abcdefghij"
    ref = FragmentRef(j, 10, 20, hashlib.sha1(content).hexdigest(), pb.NONE, backing_store=gz.store)
    store = FragmentStore(gz.store, file_root=gz.file_root)
    store.put(ref, io.BytesIO(compress_bytes(pb.NONE, content)))
    gz.broker.refresh(j)
    assert gz.append(j, b"x").status == pb.INDEX_HAS_GREATER_OFFSET
    assert gz.append(j, b"x", offset=10).status == pb.WRONG_APPEND_OFFSET
    # Appending at the index's end re-syncs the pipeline.
    r = gz.append(j, b"KLM", offset=20)
    assert r.status == pb.OK and (r.commit.begin, r.commit.end) == (20, 23)
    assert gz.content(j) == b"0123456789abcdefghijKLM"
    assert gz.append(j, b"N").commit.begin == 23


def test_min_append_rate_aborts_stalled_clients(make_broker, file_root):
    broker = make_broker(min_append_rate=1024)
    channel = grpc.insecure_channel(broker.target)
    stub = pb_grpc.JournalStub(channel)
    spec = make_spec("rate/journal", store="", codec=pb.NONE, content_type="", refresh_seconds=60)
    assert stub.Apply(pb.ApplyRequest(changes=[pb.ApplyRequest.Change(upsert=spec)])).status == pb.OK
    stalled = threading.Event()

    def gen():
        yield pb.AppendRequest(journal="rate/journal")
        yield pb.AppendRequest(content=b"x" * 100)
        stalled.wait(30)  # never sends the rest

    started = time.monotonic()
    err = rpc_error(stub.Append, gen())
    stalled.set()
    elapsed = time.monotonic() - started
    assert err.code() == grpc.StatusCode.UNKNOWN
    assert err.details() == "append stream: client stream didn't sustain the minimum append data rate"
    assert elapsed >= 1.0  # the second of credit was given
    # The journal was released and nothing became visible.
    r = stub.Append(
        iter([pb.AppendRequest(journal="rate/journal"), pb.AppendRequest(content=b"ok"), pb.AppendRequest()])
    )
    assert (r.commit.begin, r.commit.end) == (0, 2)
    channel.close()


def test_concurrent_appends_are_serialised_and_group_committed(gz):
    j = gz.create(length=1 << 20).name
    n, size = 8, 64 * 1024
    results: list[pb.AppendResponse] = []
    lock = threading.Lock()

    def worker(i):
        for _ in range(5):
            r = gz.append(j, bytes([65 + i]) * size)
            with lock:
                results.append(r)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans = sorted((r.commit.begin, r.commit.end) for r in results)
    assert spans == [(k * size, (k + 1) * size) for k in range(n * 5)]
    content = gz.content(j)
    assert len(content) == n * 5 * size
    for r in results:
        chunk = content[r.commit.begin : r.commit.end]
        assert sha1sum_to_hex(r.commit.sum) == hashlib.sha1(chunk).hexdigest()
