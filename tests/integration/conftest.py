"""Fixtures for the embedded broker's integration tests.

Every test talks to a real :class:`EmbeddedBroker` over gRPC on a port-0 loopback socket,
through the raw generated stubs (``pb_grpc.JournalStub``), so it can send message shapes a
well-behaved client never would. ``gz`` is a broker with a ``file://`` store; ``gz_store`` is
parametrised over a ``file://`` store and an ``s3://`` store on the moto server (the contract
suite runs once per backend).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import grpc
import pytest

from journalspecs import make_spec
from pyspark_gazette.broker import EmbeddedBroker
from pyspark_gazette.protocol import label_set, pb, pb_grpc

MiB = 1 << 20


class Harness:
    """A started broker plus raw-stub helpers. ``store`` is the default store URL of specs."""

    def __init__(self, make_broker, store: str, file_root: str):
        self._make_broker = make_broker
        self.store = store
        self.file_root = file_root
        self.broker: EmbeddedBroker = make_broker()
        self._connect()

    def _connect(self) -> None:
        self.channel = grpc.insecure_channel(
            self.broker.target, options=[("grpc.max_receive_message_length", 64 * MiB)]
        )
        self.stub = pb_grpc.JournalStub(self.channel)

    def close(self) -> None:
        self.channel.close()

    def restart(self, **kwargs) -> None:
        """Stop the broker gracefully and start a new one on the same data directory."""
        self.channel.close()
        self.broker.stop()
        self.broker = self._make_broker(**kwargs)
        self._connect()

    # ------------------------------------------------------------------ specs

    def spec(
        self,
        name: str,
        *,
        stores: Iterable[str] | None = None,
        length: int = 16 * MiB,
        codec: int = pb.ZSTANDARD,
        refresh: float = 60,
        flush: float = 0,
        template: str = "",
        flags: int = 0,
        labels: dict | None = None,
    ) -> pb.JournalSpec:
        return make_spec(
            name,
            stores=[self.store] if stores is None else list(stores),
            length=length,
            codec=codec,
            content_type="",
            labels=labels,
            refresh_seconds=refresh,
            flush_seconds=flush,
            template=template,
            flags=flags,
        )

    def apply(self, *changes: pb.ApplyRequest.Change) -> pb.ApplyResponse:
        return self.stub.Apply(pb.ApplyRequest(changes=list(changes)))

    def create(self, name: str | None = None, **kwargs) -> pb.JournalSpec:
        spec = self.spec(name or f"test/{uuid.uuid4().hex[:10]}", **kwargs)
        resp = self.apply(pb.ApplyRequest.Change(expect_mod_revision=0, upsert=spec))
        assert resp.status == pb.OK, resp
        return spec

    def list(self, selector: pb.LabelSelector | None = None) -> list[pb.ListResponse]:
        return list(self.stub.List(pb.ListRequest(selector=selector)))

    def mod_revision(self, name: str) -> int:
        sel = pb.LabelSelector(include=label_set({"name": name}))
        return self.list(sel)[0].journals[0].mod_revision

    # ------------------------------------------------------------------ append

    def append_msgs(self, msgs: Iterable[pb.AppendRequest], **kw) -> pb.AppendResponse:
        return self.stub.Append(iter(list(msgs)), **kw)

    def append(self, journal: str, *chunks: bytes, **params) -> pb.AppendResponse:
        msgs = [pb.AppendRequest(journal=journal, **params)]
        msgs += [pb.AppendRequest(content=c) for c in chunks if c]
        msgs.append(pb.AppendRequest())
        return self.append_msgs(msgs)

    # ------------------------------------------------------------------ read

    def read(self, journal: str, offset: int = 0, **kw) -> list[pb.ReadResponse]:
        kw.setdefault("block", False)
        return list(self.stub.Read(pb.ReadRequest(journal=journal, offset=offset, **kw), timeout=60))

    def content(self, journal: str, offset: int = 0, end_offset: int = 0) -> bytes:
        """Content [offset, end_offset or write head), read through possibly several streams."""
        out = bytearray()
        while True:
            resps = self.read(journal, offset, end_offset=end_offset)
            got = b"".join(r.content for r in resps)
            out += got
            offset += len(got)
            last = resps[-1]
            if last.status == pb.OFFSET_NOT_YET_AVAILABLE or (end_offset and offset >= end_offset):
                return bytes(out)
            if not got:
                raise AssertionError(f"read made no progress at {offset}: {resps}")

    def fragments(self, journal: str, **kw) -> pb.FragmentsResponse:
        return self.stub.ListFragments(pb.FragmentsRequest(journal=journal, **kw))


@pytest.fixture
def file_root(tmp_path) -> str:
    path = tmp_path / "file-root"
    path.mkdir()
    return str(path)


@pytest.fixture
def make_broker(tmp_path, file_root):
    """``make_broker(**kwargs)`` starts an EmbeddedBroker on this test's data directory."""
    started: list[EmbeddedBroker] = []

    def make(**kwargs) -> EmbeddedBroker:
        kwargs.setdefault("file_root", file_root)
        broker = EmbeddedBroker(str(tmp_path / "data"), **kwargs).start()
        started.append(broker)
        return broker

    yield make
    for broker in started:
        broker.stop(grace=1)


@pytest.fixture
def gz(make_broker, file_root):
    h = Harness(make_broker, "file:///fragments/", file_root)
    yield h
    h.close()


@pytest.fixture(params=["file", "s3"])
def store_url(request, file_root) -> str:
    if request.param == "file":
        return "file:///store/prefix/"
    endpoint = request.getfixturevalue("s3_server")
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/prefix/?endpoint={endpoint}&region=us-east-1"


@pytest.fixture
def gz_store(make_broker, store_url, file_root):
    h = Harness(make_broker, store_url, file_root)
    yield h
    h.close()


@pytest.fixture
def uniq() -> str:
    return uuid.uuid4().hex[:10]
