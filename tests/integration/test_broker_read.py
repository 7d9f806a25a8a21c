"""Read RPC rules (facts sheet 3.1) against local spools, through raw stubs."""

from __future__ import annotations

import hashlib
import io
import os
import threading
import time

import grpc
import pytest

from pyspark_gazette.fragments import FragmentRef, FragmentStore, compress_bytes
from pyspark_gazette.protocol import MAX_READ_CHUNK, pb, sha1sum_to_hex


def test_metadata_then_chunks(gz):
    j = gz.create().name
    data = os.urandom(100_000)
    gz.append(j, data)
    resps = gz.read(j, 0)
    meta = resps[0]
    assert meta.status == pb.OK and meta.HasField("header")
    assert meta.offset == 0 and meta.write_head == 100_000
    assert (meta.fragment.begin, meta.fragment.end) == (0, 100_000)
    assert sha1sum_to_hex(meta.fragment.sum) == hashlib.sha1(data).hexdigest()
    assert meta.fragment_url == "" and meta.fragment.mod_time == 0 and not meta.fragment.backing_store
    chunks = resps[1:-1]
    assert all(0 < len(c.content) <= MAX_READ_CHUNK for c in chunks)
    assert max(len(c.content) for c in chunks) == MAX_READ_CHUNK
    for c in chunks:
        assert c.status == pb.OK and not c.HasField("header") and c.write_head == 0 and not c.HasField("fragment")
    offsets = [c.offset for c in chunks]
    assert offsets == [sum(len(c.content) for c in chunks[:i]) for i in range(len(chunks))]
    assert b"".join(c.content for c in chunks) == data
    # Non-blocking read reaching the write head ends with OFFSET_NOT_YET_AVAILABLE.
    last = resps[-1]
    assert last.status == pb.OFFSET_NOT_YET_AVAILABLE and last.write_head == 100_000 and last.offset == 100_000


def test_read_from_the_middle_and_end_offset(gz):
    j = gz.create().name
    gz.append(j, b"0123456789")
    resps = gz.read(j, 3, end_offset=7)
    assert resps[0].offset == 3
    assert b"".join(r.content for r in resps) == b"3456"
    assert resps[-1].content  # the stream just ends at end_offset, no status message
    # Offset at end_offset: metadata only, then the stream ends.
    resps = gz.read(j, 7, end_offset=7)
    assert len(resps) == 1 and resps[0].status == pb.OK and resps[0].offset == 7
    with pytest.raises(grpc.RpcError) as err:
        gz.read(j, 5, end_offset=2)
    assert err.value.code() == grpc.StatusCode.UNKNOWN


def test_non_blocking_read_of_an_empty_journal(gz):
    j = gz.create().name
    resps = gz.read(j, 0)
    assert len(resps) == 1
    r = resps[0]
    assert r.status == pb.OFFSET_NOT_YET_AVAILABLE and r.write_head == 0 and r.HasField("header")


def test_offset_minus_one_is_the_write_head(gz):
    j = gz.create().name
    gz.append(j, b"abc")
    resps = gz.read(j, -1)
    assert resps[0].status == pb.OFFSET_NOT_YET_AVAILABLE and resps[0].offset == 3 and resps[0].write_head == 3


def test_metadata_only(gz):
    j = gz.create().name
    gz.append(j, b"abcdef")
    resps = gz.read(j, 2, metadata_only=True)
    assert len(resps) == 1
    assert resps[0].offset == 2 and resps[0].fragment.end == 6 and resps[0].write_head == 6 and not resps[0].content


def test_not_found_is_a_single_status_with_header(gz):
    resps = gz.read("no/such/journal")
    assert len(resps) == 1
    assert resps[0].status == pb.JOURNAL_NOT_FOUND and resps[0].header.etcd.revision > 0


class Reader(threading.Thread):
    """Collects a Read stream on a thread; ``wait_for(pred)`` waits for the condition."""

    def __init__(self, gz, req: pb.ReadRequest):
        super().__init__(daemon=True)
        self.call = gz.stub.Read(req)
        self.got: list[pb.ReadResponse] = []
        self.cond = threading.Condition()
        self.error: grpc.RpcError | None = None
        self.start()

    def run(self):
        try:
            for r in self.call:
                with self.cond:
                    self.got.append(r)
                    self.cond.notify_all()
        except grpc.RpcError as e:
            self.error = e
        with self.cond:
            self.cond.notify_all()

    def content(self) -> bytes:
        return b"".join(r.content for r in self.got)

    def wait_for(self, pred, timeout=20):
        with self.cond:
            assert self.cond.wait_for(lambda: pred(self), timeout=timeout), self.got


def test_blocking_read_wakes_on_append(gz):
    j = gz.create().name
    reader = Reader(gz, pb.ReadRequest(journal=j, offset=0, block=True))
    # No message at all, not even a header, until content exists.
    gz.append(j)  # a zero-byte append does not wake it with content
    assert reader.got == []
    gz.append(j, b"hello")
    reader.wait_for(lambda r: r.content() == b"hello")
    assert reader.got[0].HasField("header") and reader.got[0].fragment.end == 5
    gz.append(j, b" world")
    reader.wait_for(lambda r: r.content() == b"hello world")
    metas = [r for r in reader.got if r.HasField("fragment")]
    # The growing spool shows up again with a larger end; only the first message has a header.
    assert [(m.fragment.begin, m.fragment.end, m.offset) for m in metas] == [(0, 5, 0), (0, 11, 5)]
    assert sum(1 for r in reader.got if r.HasField("header")) == 1
    reader.call.cancel()
    reader.join(10)
    assert not reader.is_alive()


def test_blocking_read_at_write_head(gz):
    j = gz.create().name
    gz.append(j, b"old")
    reader = Reader(gz, pb.ReadRequest(journal=j, offset=-1, block=True))
    gz.append(j, b"new")
    reader.wait_for(lambda r: r.content() == b"new")
    assert reader.got[0].offset == 3
    reader.call.cancel()
    reader.join(10)


def test_blocking_reads_end_when_the_broker_stops(gz):
    j = gz.create().name
    reader = Reader(gz, pb.ReadRequest(journal=j, offset=0, block=True))
    t0 = time.monotonic()
    gz.broker.stop(grace=10)
    reader.join(15)
    assert not reader.is_alive()
    assert time.monotonic() - t0 < 10  # woken, not left to the grace period


def test_many_blocked_readers_wake_together(gz):
    j = gz.create().name
    readers = [Reader(gz, pb.ReadRequest(journal=j, offset=0, block=True)) for _ in range(10)]
    gz.append(j, b"x" * 1000)
    for r in readers:
        r.wait_for(lambda rd: len(rd.content()) == 1000)
        r.call.cancel()
    for r in readers:
        r.join(10)


def _put_foreign(gz, journal, begin, content, codec=pb.NONE, mtime=None):
    """Write a fragment straight into the (file) store, as another broker would."""
    ref = FragmentRef(
        journal, begin, begin + len(content), hashlib.sha1(content).hexdigest(), codec, backing_store=gz.store
    )
    store = FragmentStore(gz.store, file_root=gz.file_root)
    store.put(ref, io.BytesIO(compress_bytes(codec, content)))
    if mtime is not None:
        path = os.path.join(gz.file_root, store.object_path(ref))
        os.utime(path, (mtime, mtime))
    gz.broker.refresh(journal)
    return ref


def test_offset_jumps_over_a_hole_at_the_journal_start(gz):
    j = gz.create(codec=pb.GZIP).name
    _put_foreign(gz, j, 100, b"pruned start", codec=pb.GZIP)
    resps = gz.read(j, 0)
    assert resps[0].offset == 100 and resps[0].fragment.begin == 100
    assert resps[0].fragment_url.startswith("file:///fragments/")
    assert b"".join(r.content for r in resps) == b"pruned start"


def test_recent_hole_in_the_middle_blocks_old_one_is_skipped(gz):
    j = gz.create(codec=pb.NONE).name
    _put_foreign(gz, j, 0, b"0123456789")
    _put_foreign(gz, j, 20, b"recent")
    resps = gz.read(j, 10)
    assert [r.status for r in resps] == [pb.OFFSET_NOT_YET_AVAILABLE]
    _put_foreign(gz, j, 40, b"ancient", mtime=time.time() - 7 * 3600)
    resps = gz.read(j, 30)
    assert resps[0].offset == 40
    assert b"".join(r.content for r in resps) == b"ancient"


def test_begin_mod_time_skips_older_persisted_fragments(gz):
    j = gz.create(codec=pb.NONE).name
    now = int(time.time())
    _put_foreign(gz, j, 0, b"old-content", mtime=now - 1000)
    _put_foreign(gz, j, 11, b"new-content", mtime=now)
    resps = gz.read(j, 0, begin_mod_time=now - 10)
    assert resps[0].offset == 11
    assert b"".join(r.content for r in resps) == b"new-content"
    assert b"".join(r.content for r in gz.read(j, 0)) == b"old-contentnew-content"


def test_read_only_journal_can_be_read(gz):
    j = gz.create(flags=1, codec=pb.NONE).name
    _put_foreign(gz, j, 0, b"from elsewhere")
    assert b"".join(r.content for r in gz.read(j, 0)) == b"from elsewhere"


def test_blocked_read_ends_when_the_journal_is_deleted(gz):
    j = gz.create().name
    reader = Reader(gz, pb.ReadRequest(journal=j, offset=0, block=True))
    assert gz.apply(pb.ApplyRequest.Change(expect_mod_revision=-1, delete=j)).status == pb.OK
    reader.join(10)
    assert not reader.is_alive()
    # Either it was blocked (and ended without a message) or it began after the delete.
    assert [r.status for r in reader.got] in ([], [pb.JOURNAL_NOT_FOUND])
