"""Spool recovery after crashes (broker/fragment/spool.py)."""

from __future__ import annotations

import hashlib
import os

import pytest

from pyspark_gazette.broker.fragment.spool import Spool
from pyspark_gazette.protocol import label_set, pb


def test_spool_recovery_truncates_to_the_last_record(tmp_path):
    d = str(tmp_path)
    s = Spool.create("j/x", d, 100, pb.NONE, b"")
    s.write(b"hello")
    rec = s.make_record(label_set({"kk": "v"}).SerializeToString(), 1.0)
    s.sync([rec])
    s.write(b" unacked")  # never committed
    s.close()
    with open(s.log_path, "ab") as f:
        f.write(b"\x50\x53\x5a\x47 torn record")
    r = Spool.recover("j/x", d, 100)
    assert (r.begin, r.end, r.seq_end) == (100, 105, 105)
    assert os.path.getsize(r.data_path) == 5
    assert r.durable.registers_proto() == label_set({"kk": "v"})
    r.write(b"!")
    assert r.make_record(b"", 2.0).digest == hashlib.sha1(b"hello!").digest()
    r.close()


def test_a_crash_while_removing_a_persisted_spool_leaves_it_recoverable(tmp_path, monkeypatch):
    """kill -9 between the two unlinks of remove_files: the restart drops the spool instead of
    finding commit records whose data file is gone (found by the kill -9 durability test)."""
    d = str(tmp_path)
    s = Spool.create("j/x", d, 100, pb.NONE, b"")
    s.write(b"persisted content")
    s.sync([s.make_record(b"", 1.0)])
    s.close()
    real_unlink, calls = os.unlink, []

    def die_after_first(path):
        calls.append(path)
        if len(calls) > 1:
            raise SystemExit("killed")
        real_unlink(path)

    monkeypatch.setattr(os, "unlink", die_after_first)
    with pytest.raises(SystemExit):
        s.remove_files()
    monkeypatch.setattr(os, "unlink", real_unlink)
    assert Spool.recover("j/x", d, 100) is None
    assert os.listdir(d) == []


def test_spool_without_a_valid_record_is_dropped(tmp_path):
    d = str(tmp_path)
    s = Spool.create("j/x", d, 0, pb.NONE, b"")
    s.close()
    with open(s.log_path, "wb") as f:
        f.write(b"junk")
    assert Spool.recover("j/x", d, 0) is None
    assert not os.path.exists(s.data_path) and not os.path.exists(s.log_path)
