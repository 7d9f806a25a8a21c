"""Malformed requests (issue #7, bad input): the broker answers each with the right gRPC error
or Status and keeps serving.

Every case runs against a journal that already holds content. After the bad request, the same
test appends and reads normally and checks that the journal holds exactly the good content: no
byte of a rejected append became visible. Gazette's Go broker returns request-validation
failures as plain errors (gRPC code UNKNOWN with the message), and so does this broker; it uses
ABORTED for an append stream that ends without its commit message (Go: an unexpected-EOF error),
a difference documented in docs/reliability.md.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import grpc
import pytest
from google.protobuf import duration_pb2

from pyspark_gazette.protocol import label_set, pb

BEFORE = b"before\n"
INVALID = grpc.StatusCode.UNKNOWN


def bad_labels() -> pb.LabelSet:
    return pb.LabelSet(labels=[pb.Label(name="b a d", value="1")])


def append_stream(*msgs: pb.AppendRequest) -> Iterator[pb.AppendRequest]:
    yield from msgs


def header(j: str, **kw) -> pb.AppendRequest:
    return pb.AppendRequest(journal=j, **kw)


def content(data: bytes) -> pb.AppendRequest:
    return pb.AppendRequest(content=data)


COMMIT = pb.AppendRequest()


def _spec(gz, j: str, **fields) -> pb.ApplyRequest:
    spec = gz.spec(j.replace("/", "/other-", 1))
    for path, value in fields.items():
        target = spec
        *parents, leaf = path.split(".")
        for p in parents:
            target = getattr(target, p)
        if isinstance(value, pb.LabelSet):
            getattr(target, leaf).CopyFrom(value)
        else:
            setattr(target, leaf, value)
    return pb.ApplyRequest(changes=[pb.ApplyRequest.Change(expect_mod_revision=0, upsert=spec)])


def _read(gz, **kw) -> list[pb.ReadResponse]:
    kw.setdefault("block", False)
    return list(gz.stub.Read(pb.ReadRequest(**kw), timeout=30))


def _fragments(gz, **kw) -> pb.FragmentsResponse:
    return gz.stub.ListFragments(pb.FragmentsRequest(**kw), timeout=30)


def _append(gz, *msgs: pb.AppendRequest) -> pb.AppendResponse:
    return gz.stub.Append(append_stream(*msgs), timeout=30)


# name -> (request(gz, journal), expected gRPC code, text in the details)
ERRORS: dict[str, tuple[Callable, grpc.StatusCode, str]] = {
    # bad journal names
    "read: name with a space": (lambda gz, j: _read(gz, journal="bad name!"), INVALID, "journal"),
    "read: name too short": (lambda gz, j: _read(gz, journal="ab"), INVALID, "length"),
    "append: absolute name": (
        lambda gz, j: _append(gz, header("/abs/journal"), content(b"x\n"), COMMIT),
        INVALID,
        "must not begin with '/'",
    ),
    "append: unclean name": (
        lambda gz, j: _append(gz, header("a/../b"), content(b"x\n"), COMMIT),
        INVALID,
        "clean path",
    ),
    "list fragments: unclean name": (lambda gz, j: _fragments(gz, journal="a//b"), INVALID, "clean path"),
    "apply: unclean name": (
        lambda gz, j: gz.stub.Apply(
            pb.ApplyRequest(changes=[pb.ApplyRequest.Change(expect_mod_revision=0, upsert=gz.spec("x/./y"))])
        ),
        INVALID,
        "clean path",
    ),
    "list: bad selector label": (
        lambda gz, j: list(gz.stub.List(pb.ListRequest(selector=pb.LabelSelector(include=bad_labels())))),
        INVALID,
        "selector",
    ),
    # invalid specs
    "apply: fragment length too small": (
        lambda gz, j: gz.stub.Apply(_spec(gz, j, **{"fragment.length": 1000})),
        INVALID,
        "fragment.length",
    ),
    "apply: replication 0": (lambda gz, j: gz.stub.Apply(_spec(gz, j, replication=0)), INVALID, "replication"),
    "apply: unknown codec value": (
        lambda gz, j: gz.stub.Apply(_spec(gz, j, **{"fragment.compression_codec": 42})),
        INVALID,
        "compression_codec",
    ),
    "apply: bad label name": (lambda gz, j: gz.stub.Apply(_spec(gz, j, labels=bad_labels())), INVALID, "label"),
    "apply: no changes": (lambda gz, j: gz.stub.Apply(pb.ApplyRequest()), INVALID, ""),
    # oversized chunk: over the broker's max receive size (4 MiB by default)
    "append: oversized chunk": (
        lambda gz, j: _append(gz, header(j), content(b"x" * (5 << 20)), COMMIT),
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        "larger than max",
    ),
    # protocol-order violations
    "append: content before the header": (
        lambda gz, j: _append(gz, content(b"x\n"), header(j), COMMIT),
        INVALID,
        "must not carry content",
    ),
    "append: header with content": (
        lambda gz, j: _append(gz, header(j, content=b"x\n"), COMMIT),
        INVALID,
        "must not carry content",
    ),
    "append: second header": (
        lambda gz, j: _append(gz, header(j), content(b"x\n"), header(j), content(b"y\n"), COMMIT),
        INVALID,
        "expected Content chunk",
    ),
    "append: content after the commit": (
        lambda gz, j: _append(gz, header(j), content(b"x\n"), COMMIT, content(b"y\n")),
        INVALID,
        "expected EOF",
    ),
    "append: EOF without commit": (
        lambda gz, j: _append(gz, header(j), content(b"x\n")),
        grpc.StatusCode.ABORTED,
        "rolled back",
    ),
    "append: negative offset": (lambda gz, j: _append(gz, header(j, offset=-3), COMMIT), INVALID, "offset"),
    "read: negative offset": (lambda gz, j: _read(gz, journal=j, offset=-5), INVALID, "offset"),
    "read: end offset before offset": (
        lambda gz, j: _read(gz, journal=j, offset=5, end_offset=2),
        INVALID,
        "end_offset",
    ),
    "read: negative end offset": (lambda gz, j: _read(gz, journal=j, end_offset=-1), INVALID, "end_offset"),
    "list fragments: page limit over 10000": (
        lambda gz, j: _fragments(gz, journal=j, page_limit=10_001),
        INVALID,
        "page_limit",
    ),
    "list fragments: negative page token": (
        lambda gz, j: _fragments(gz, journal=j, next_page_token=-1),
        INVALID,
        "next_page_token",
    ),
    "list fragments: end before begin mod time": (
        lambda gz, j: _fragments(gz, journal=j, begin_mod_time=100, end_mod_time=50),
        INVALID,
        "end_mod_time",
    ),
    "list fragments: negative signature TTL": (
        lambda gz, j: _fragments(gz, journal=j, signatureTTL=duration_pb2.Duration(seconds=-1)),
        INVALID,
        "signatureTTL",
    ),
    # register nonsense
    "append: bad union register": (
        lambda gz, j: _append(gz, header(j, union_registers=bad_labels()), content(b"x\n"), COMMIT),
        INVALID,
        "registers",
    ),
    "append: bad check selector": (
        lambda gz, j: _append(gz, header(j, check_registers=pb.LabelSelector(exclude=bad_labels())), COMMIT),
        INVALID,
        "registers",
    ),
    "append: register change without content": (
        lambda gz, j: _append(gz, header(j, union_registers=label_set({"key": "v"})), COMMIT),
        INVALID,
        "non-empty Append",
    ),
}


def assert_still_serving(gz, j: str) -> None:
    """A normal append and read work, and the journal holds exactly the good content."""
    r = gz.append(j, b"after\n")
    assert r.status == pb.OK and (r.commit.begin, r.commit.end) == (len(BEFORE), len(BEFORE) + 6)
    assert gz.content(j) == BEFORE + b"after\n"
    assert gz.read(j, len(BEFORE) + 6)[-1].status == pb.OFFSET_NOT_YET_AVAILABLE
    names = {entry.spec.name for resp in gz.list() for entry in resp.journals}
    assert names <= {j, "bad/other"}  # no rejected spec was created


@pytest.fixture
def journal(gz) -> str:
    j = gz.create("bad/input", length=1 << 20).name
    assert gz.append(j, BEFORE).status == pb.OK
    return j


@pytest.mark.parametrize("case", list(ERRORS), ids=list(ERRORS))
def test_malformed_request_is_a_grpc_error_and_the_broker_keeps_serving(gz, journal, case):
    request, code, text = ERRORS[case]
    with pytest.raises(grpc.RpcError) as err:
        request(gz, journal)
    assert err.value.code() == code, err.value.details()
    assert text in (err.value.details() or ""), err.value.details()
    assert_still_serving(gz, journal)


def test_status_answers_for_well_formed_requests_that_cannot_be_served(gz, journal):
    """Not malformed, so not gRPC errors: a Status in an ordinary response (facts sheet 3.1/3.2)."""
    beyond = _read(gz, journal=journal, offset=1000)
    assert [r.status for r in beyond] == [pb.OFFSET_NOT_YET_AVAILABLE]
    assert beyond[0].write_head == len(BEFORE)
    missing = _read(gz, journal="bad/missing")
    assert [r.status for r in missing] == [pb.JOURNAL_NOT_FOUND] and missing[0].HasField("header")
    assert _append(gz, header("bad/missing"), content(b"x\n"), COMMIT).status == pb.JOURNAL_NOT_FOUND
    assert _fragments(gz, journal="bad/missing").status == pb.JOURNAL_NOT_FOUND
    wrong = _append(gz, header(journal, offset=3), content(b"x\n"), COMMIT)
    assert wrong.status == pb.WRONG_APPEND_OFFSET
    assert_still_serving(gz, journal)


def test_a_blocked_reader_of_another_journal_is_served_through_a_storm_of_bad_requests(gz, journal):
    other = gz.create("bad/other").name
    got: list[bytes] = []
    arrived = threading.Event()
    call = gz.stub.Read(pb.ReadRequest(journal=other, offset=0, block=True), timeout=60)

    def read_first_content() -> None:
        for r in call:
            if r.content:
                got.append(r.content)
                arrived.set()
                return

    reader = threading.Thread(target=read_first_content)
    reader.start()
    try:
        for case, (request, code, _) in ERRORS.items():
            with pytest.raises(grpc.RpcError) as err:
                request(gz, journal)
            assert err.value.code() == code, case
        assert not arrived.is_set()
        assert gz.append(other, b"still here\n").status == pb.OK
        assert arrived.wait(30)
        assert got == [b"still here\n"]
    finally:
        call.cancel()
        reader.join(10)
    assert_still_serving(gz, journal)
