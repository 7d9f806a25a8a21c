"""The embedded broker's state restored from an older copy under a client that lives on (as a
notebook's client over a development broker): the revision the client remembers is gone, and
must not hold its next calls. The real-Gazette case: tests/gazette/test_etcd_revision_went_back.py."""

from __future__ import annotations

import logging
import shutil

import pytest

from journalspecs import make_spec
from pyspark_gazette.broker import EmbeddedBroker
from pyspark_gazette.client import Change, ClientConfig, JournalClient


@pytest.mark.parametrize("restored", ["older-copy", "new-data-dir"])
def test_a_client_goes_on_after_the_brokers_state_went_back(tmp_path, caplog, restored):
    """``older-copy``: the broker's data directory is restored from a copy taken before the
    client raised the revision: the same cluster id at a lower revision, so the client checks
    (a List asking the broker to reach the revision first, which it waits for until its
    deadline, as Gazette does) and forgets it. ``new-data-dir``: another cluster id, forgotten
    at once. Either way the next List, Append and Read complete, and a WARNING names the
    revision."""
    data, store = tmp_path / "broker", tmp_path / "store"
    spec = make_spec("back/a", store="file:///back/")
    with EmbeddedBroker(str(data), file_root=str(store)) as broker:
        port = broker.port
        client = JournalClient(ClientConfig(broker.address, broker_timeout=60))
        client.apply([Change(expect_mod_revision=0, upsert=spec)])
    shutil.copytree(data, tmp_path / "copy")
    try:
        with EmbeddedBroker(str(data), port=port, file_root=str(store)):
            for i in range(10):
                labelled = make_spec("back/a", store="file:///back/", labels={"round": str(i)})
                client.apply([Change(expect_mod_revision=-1, upsert=labelled)])
            client.append("back/a", b'{"n":1}\n')
            remembered = client.conns.etcd_revision
        shutil.rmtree(data)
        if restored == "older-copy":
            shutil.copytree(tmp_path / "copy", data)
        with EmbeddedBroker(str(data), port=port, file_root=str(store)):
            if restored == "new-data-dir":
                client_of_new = JournalClient(ClientConfig(f"http://127.0.0.1:{port}"))
                client_of_new.apply([Change(expect_mod_revision=0, upsert=spec)])
                client_of_new.close()
            with caplog.at_level(logging.WARNING, logger="pyspark_gazette.client.conn"):
                (info,) = client.list_journals("name=back/a")
                assert info.mod_revision < remembered
                client.append("back/a", b'{"n":2}\n')
                assert client.read_all("back/a").endswith(b'{"n":2}\n')
            assert 0 < client.conns.etcd_revision < remembered
            (warned,) = [r.getMessage() for r in caplog.records if "no longer asks brokers" in r.getMessage()]
            assert f"Etcd revision {remembered} " in warned
            why = "did not reach it" if restored == "older-copy" else "another Etcd cluster"
            assert why in warned, warned
    finally:
        client.close()
