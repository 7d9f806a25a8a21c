"""Path traversal: file:// store paths, fragment URLs and content paths stay under the file root.

Each escape route is tried against the three entry points that turn outside text into a
local path: :class:`FragmentStore` (file stores, as the broker's persister and Spark executors
use them), :func:`open_fragment_url` (signed ``file://`` URLs read with a client ``file_root``)
and :func:`confined_path` itself.
"""

from __future__ import annotations

import hashlib
import io
import os

import pytest

from pyspark_gazette.errors import FragmentNotFoundError, StoreURLError
from pyspark_gazette.fragments import FragmentRef, FragmentStore, open_fragment_url
from pyspark_gazette.fragments.paths import check_content_path, confined_path
from pyspark_gazette.protocol import pb

CONTENT = b"fragment content\n"
SECRET = b"outside the root\n"


def ref(journal: str = "acme/clicks", postfix: str = "") -> FragmentRef:
    return FragmentRef(journal, 0, len(CONTENT), hashlib.sha1(CONTENT).hexdigest(), pb.NONE, path_postfix=postfix)


@pytest.fixture
def layout(tmp_path):
    """``root`` (the file root) and ``outside`` (a sibling directory holding a secret file)."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.raw").write_bytes(SECRET)
    return root, outside


# ---------------------------------------------------------------------------- confined_path


def test_confined_path_keeps_inside_paths_and_treats_absolute_ones_as_relative(layout):
    root, _ = layout
    assert confined_path(str(root), "a/b/c.raw", source="file:///a/") == str(root / "a/b/c.raw")
    assert confined_path(str(root), "/a/./b/../c.raw", source="x") == str(root / "a/c.raw")
    assert confined_path(str(root), "/etc/passwd", source="x") == str(root / "etc/passwd")
    assert confined_path(str(root), "", source="x") == str(root)


@pytest.mark.parametrize("relative", ["..", "../outside/secret.raw", "a/../../outside", "/../../etc/passwd"])
def test_confined_path_refuses_dot_dot(layout, relative):
    root, _ = layout
    with pytest.raises(StoreURLError, match="escapes the file root"):
        confined_path(str(root), relative, source="file:///")


def test_confined_path_refuses_symlinks_leading_out_and_follows_those_staying_in(layout):
    root, outside = layout
    (root / "link-out").symlink_to(outside, target_is_directory=True)
    (root / "file-out.raw").symlink_to(outside / "secret.raw")
    (root / "real").mkdir()
    (root / "link-in").symlink_to(root / "real", target_is_directory=True)
    for relative in ("link-out/secret.raw", "file-out.raw", "link-out/new/file.raw"):
        with pytest.raises(StoreURLError, match="through a symbolic link"):
            confined_path(str(root), relative, source="file:///")
    assert confined_path(str(root), "link-in/x.raw", source="x") == str(root / "real/x.raw")


def test_confined_path_refuses_nul_and_redacts_the_source(layout):
    root, _ = layout
    with pytest.raises(StoreURLError, match="NUL") as info:
        confined_path(str(root), "a\x00b", source="https://h/x?X-Amz-Signature=deadbeef")
    assert "deadbeef" not in str(info.value)


def test_a_root_that_is_itself_a_symlink_still_works(layout, tmp_path):
    root, _ = layout
    alias = tmp_path / "alias"
    alias.symlink_to(root, target_is_directory=True)
    assert confined_path(str(alias), "a.raw", source="x") == str(root / "a.raw")


def test_check_content_path_keeps_fragments_in_their_journal_directory():
    check_content_path("acme/clicks", ref().content_path, source="s3://b/")
    check_content_path("acme/clicks", ref(postfix="date=1/hour=2").content_path, source="s3://b/")
    for journal, postfix in [("../acme", ""), ("..", ""), ("acme/clicks", "../../other"), ("acme/clicks", "..")]:
        with pytest.raises(StoreURLError, match="escapes the journal's directory"):
            check_content_path(journal, ref(journal, postfix).content_path, source="s3://b/")


# ---------------------------------------------------------------------------- FragmentStore


def test_file_store_refuses_journal_and_postfix_escapes_even_inside_the_root(layout):
    root, _ = layout
    store = FragmentStore("file:///stores/a/", file_root=str(root))
    for evil in (ref("../b"), ref("acme/clicks", postfix="../../../b"), ref("/abs/journal")):
        with pytest.raises(StoreURLError, match="escapes"):
            store.put(evil, io.BytesIO(CONTENT))
        with pytest.raises(StoreURLError, match="escapes"):
            store.open_raw(evil)
    with pytest.raises(StoreURLError, match="escapes"):
        store.list("../b")
    assert not (root / "stores" / "b").exists()


def test_remote_store_keys_refuse_journal_escapes_too():
    store = FragmentStore("s3://bucket/prefix/")
    assert store.object_path(ref()) == f"prefix/{ref().content_path}"
    with pytest.raises(StoreURLError, match="escapes the journal's directory"):
        store.object_path(ref("../other"))


def test_file_store_refuses_a_symlinked_fragment_pointing_outside(layout):
    root, outside = layout
    store = FragmentStore("file:///s/", file_root=str(root))
    good = ref()
    store.put(good, io.BytesIO(CONTENT))
    target = root / "s" / good.content_path
    target.unlink()
    target.symlink_to(outside / "secret.raw")
    with pytest.raises(StoreURLError, match="symbolic link"):
        store.open_raw(good)
    with pytest.raises(StoreURLError, match="symbolic link"):
        store.put(good, io.BytesIO(CONTENT))
    assert (outside / "secret.raw").read_bytes() == SECRET  # not overwritten


def test_file_store_refuses_a_symlinked_store_directory(layout):
    root, outside = layout
    (root / "s").symlink_to(outside, target_is_directory=True)
    with pytest.raises(StoreURLError, match="symbolic link"):
        FragmentStore("file:///s/", file_root=str(root))


# ---------------------------------------------------------------------------- fragment URLs


@pytest.mark.parametrize(
    "url",
    [
        "file:///../outside/secret.raw",
        "file:///%2e%2e/outside/secret.raw",
        "file:///%2E%2E/outside/secret.raw",
        "file:///a/%2e%2e/%2e%2e/outside/secret.raw",
        "file:///..%2foutside/secret.raw",
    ],
)
def test_fragment_url_dot_dot_in_any_spelling_is_refused(layout, url):
    root, _ = layout
    with pytest.raises(StoreURLError, match="escapes the file root"):
        open_fragment_url(url, pb.NONE, file_root=str(root))


def test_fragment_url_through_a_symlink_is_refused_and_names_the_redacted_url(layout):
    root, outside = layout
    (root / "link").symlink_to(outside, target_is_directory=True)
    url = "file:///link/secret.raw?X-Amz-Signature=cafebabe"
    with pytest.raises(StoreURLError, match="symbolic link") as info:
        open_fragment_url(url, pb.NONE, file_root=str(root))
    assert "file:///link/secret.raw" in str(info.value) and "cafebabe" not in str(info.value)


def test_fragment_url_absolute_path_is_read_under_the_root(layout):
    root, _ = layout
    (root / "etc").mkdir()
    (root / "etc" / "frag.raw").write_bytes(CONTENT)
    with open_fragment_url("file:////etc/frag.raw", pb.NONE, file_root=str(root)) as raw:
        assert raw.read() == CONTENT


def test_a_missing_fragment_file_is_one_error_without_a_chained_oserror(layout):
    """Spark shows a task's whole exception chain: the error names the file, the chain adds nothing."""
    root, _ = layout
    with pytest.raises(FragmentNotFoundError) as info:
        open_fragment_url("file:///gone/frag.raw", pb.NONE, file_root=str(root))
    assert str(root / "gone" / "frag.raw") in str(info.value) and "FileNotFoundError" in str(info.value)
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_double_encoding_is_decoded_once(layout):
    root, _ = layout
    # %252e%252e decodes to the literal name '%2e%2e', a file name inside the root, not '..'.
    (root / "%2e%2e").mkdir()
    (root / "%2e%2e" / "x.raw").write_bytes(CONTENT)
    with open_fragment_url("file:///%252e%252e/x.raw", pb.NONE, file_root=str(root)) as raw:
        assert raw.read() == CONTENT


def test_urls_and_stores_stay_away_from_the_secret(layout):
    """Whatever went wrong above, the file outside the root was never opened for writing."""
    root, outside = layout
    store = FragmentStore("file:///", file_root=str(root))
    with pytest.raises(StoreURLError):
        store.put(ref("../outside"), io.BytesIO(b"overwrite"))
    assert os.listdir(outside) == ["secret.raw"]
    assert (outside / "secret.raw").read_bytes() == SECRET
