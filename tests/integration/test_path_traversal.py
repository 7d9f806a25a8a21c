"""Path traversal against a running broker: journal names, store URLs, symlinked fragments and
signed file:// URLs cannot reach files outside the configured file root."""

from __future__ import annotations

import grpc
import pytest

from pyspark_gazette.client import ClientConfig, JournalClient
from pyspark_gazette.errors import StoreURLError
from pyspark_gazette.fragments import FragmentRef
from pyspark_gazette.protocol import pb

SECRET = b"a secret outside the file root\n"


@pytest.fixture
def outside(tmp_path):
    path = tmp_path / "outside"
    path.mkdir()
    (path / "secret.raw").write_bytes(SECRET)
    return path


@pytest.mark.parametrize("name", ["../abcd", "../../etc/passwd", "a/../../b", "/etc/passwd"])
def test_journal_names_that_climb_are_invalid(gz, name):
    with pytest.raises(grpc.RpcError) as info:
        gz.create(name)
    assert info.value.code() == grpc.StatusCode.UNKNOWN
    assert "invalid journal name" in info.value.details()


@pytest.mark.parametrize("store", ["file:///../outside/", "file:///a/../../outside/", "file:///%2e%2e/outside/"])
def test_file_store_urls_outside_the_root_are_invalid(gz, store, outside):
    with pytest.raises(grpc.RpcError) as info:
        gz.create("acme/escape", stores=[store])
    assert info.value.code() == grpc.StatusCode.UNKNOWN
    assert "escapes the file root" in info.value.details()
    assert sorted(p.name for p in outside.iterdir()) == ["secret.raw"]


def test_a_symlink_to_a_directory_outside_is_refused_as_a_store(gz, file_root, outside):
    import os

    os.symlink(outside, os.path.join(file_root, "linked"))
    with pytest.raises(grpc.RpcError) as info:
        gz.create("acme/linked", stores=["file:///linked/"])
    assert info.value.code() == grpc.StatusCode.UNKNOWN and "symbolic link" in info.value.details()


def _persisted(gz, journal: str) -> FragmentRef:
    gz.create(journal, codec=pb.NONE, length=1024)
    assert gz.append(journal, b"x" * 2000).status == pb.OK
    assert gz.append(journal, b"y" * 10).status == pb.OK  # rolls the first spool
    assert gz.broker.wait_persisted(30)
    frags = [f.spec for f in gz.fragments(journal).fragments if f.spec.backing_store]
    assert frags
    return FragmentRef.from_proto(frags[0])


def test_a_fragment_replaced_by_a_symlink_outside_is_not_served(gz, file_root, outside):
    import os

    ref = _persisted(gz, "acme/sym")
    path = os.path.join(file_root, "fragments", ref.content_path)
    os.remove(path)
    os.symlink(outside / "secret.raw", path)
    # Through the broker: the read fails, and never carries the secret.
    with pytest.raises(grpc.RpcError) as info:
        b"".join(r.content for r in gz.read("acme/sym", 0))
    assert info.value.code() == grpc.StatusCode.UNAVAILABLE and "symbolic link" in info.value.details()
    # Directly, with the client's own file_root mount of the store: refused too.
    with JournalClient(ClientConfig(gz.broker.address, file_root=file_root)) as c:
        with c.retry_reader("acme/sym", 0, block=False) as r:
            with pytest.raises(StoreURLError, match="symbolic link"):
                r.read()
