"""An append link's buffer (client/append_service.py's _Spool): memory first, then a file."""

from __future__ import annotations

import random

import pytest

from pyspark_gazette.client.append_service import _Spool


@pytest.mark.parametrize("limit", [0, 7, 64, 1 << 20])
def test_a_spool_gives_back_what_was_written_less_what_was_rolled_back(limit):
    """Writes and truncations at random, against a bytearray: the same bytes come back in
    chunks, whether they stayed in memory or moved to a file part way."""
    rng = random.Random(limit)
    spool, want, spilled = _Spool(limit), bytearray(), False
    for _ in range(200):
        if rng.random() < 0.2 and want:
            keep = rng.randrange(len(want) + 1)
            spool.truncate(keep)
            del want[keep:]
        else:
            data = rng.randbytes(rng.randrange(0, 40))
            spilled = spilled or len(want) + len(data) > limit
            spool.write(memoryview(data) if rng.random() < 0.5 else data)
            want += data
        assert spool.size == len(want)
    chunk = rng.randrange(1, 50)
    got = list(spool.chunks(len(want), chunk))
    assert b"".join(got) == bytes(want)
    assert all(0 < len(c) <= chunk for c in got)
    if spool._file is not None:  # read back from the file: whole chunks
        assert all(len(c) == chunk for c in got[:-1])
    assert b"".join(spool.chunks(len(want) // 2, chunk)) == bytes(want[: len(want) // 2])
    assert (spool._file is not None) == spilled == (limit < 1 << 20)  # once in a file, it stays there
    spool.close()


def test_a_spool_stays_in_memory_up_to_its_limit_and_moves_to_a_file_past_it():
    spool = _Spool(10)
    spool.write(b"0123456789")
    assert spool._file is None
    spool.write(b"x")
    assert spool._file is not None and spool._pieces is None
    spool.truncate(4)
    spool.write(b"!")
    assert b"".join(spool.chunks(5, 2)) == b"0123!"
    spool.close()


def test_a_spool_keeps_immutable_writes_without_copying_and_copies_mutable_ones():
    """What the encoder writes (bytes, views into bytes) is kept by reference; a bytearray or a
    view of one is copied, so the caller may reuse it once the write returns."""
    spool = _Spool()
    encoded = b"a" * 100 + b"b" * 100
    spool.write(memoryview(encoded)[50:150])
    spool.write(encoded)
    reused = bytearray(b"xyz")
    spool.write(reused)
    spool.write(memoryview(reused)[1:])
    reused[:] = b"!!!"
    assert spool._pieces[0].obj is encoded and spool._pieces[1].obj is encoded
    assert b"".join(spool.chunks(spool.size, 64)) == encoded[50:150] + encoded + b"xyz" + b"yz"
    spool.truncate(120)
    assert b"".join(spool.chunks(spool.size, 1000)) == encoded[50:150] + encoded[:20]
    spool.close()


@pytest.mark.parametrize("size", [1, 127, 128, 300, 16383, 16384, 1 << 20])
def test_a_content_message_is_the_serialized_append_request(size):
    """The appender sends content chunks serialized by hand: the bytes protobuf would write."""
    from pyspark_gazette.client.appender import content_message
    from pyspark_gazette.protocol import pb

    chunk = bytes(range(256)) * (size // 256) + bytes(size % 256)
    want = pb.AppendRequest(content=chunk).SerializeToString()
    assert content_message(chunk) == want
    assert content_message(memoryview(b"--" + chunk + b"--")[2:-2]) == want
    assert pb.AppendRequest.FromString(content_message(chunk)).content == chunk
