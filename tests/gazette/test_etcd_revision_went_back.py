"""A client that lives on while its cluster's Etcd is recreated: the Etcd revision it remembers
(sent as ``min_etcd_revision``, which Gazette's main waits for) will not come again, and must not
hold its next calls.

The cluster is recreated as a development stack is under a running notebook: etcd and the
broker killed, etcd's data deleted, both started again on the same ports, the journal applied
again. The client object made before goes on.
"""

from __future__ import annotations

import logging
import shutil
import threading

import pytest

import realgazette
from journalspecs import make_spec
from pyspark_gazette.client import Change, conn

pytestmark = pytest.mark.slow

#: Seconds the client's next calls get before the test fails: far more than they take (a check of
#: the remembered revision is bounded by conn.ETCD_CATCH_UP), far less than forever.
DEADLINE = 60.0


def _recreate(cluster: realgazette.GazetteCluster) -> None:
    """Kill the brokers and etcd, delete etcd's data, start both again on the same ports."""
    for b in cluster.brokers:
        b.kill()
    cluster.etcd.kill()
    shutil.rmtree(cluster.etcd.dir / "etcd-data")
    cluster.etcd.start()
    for b in cluster.brokers:
        b.start()


def _finish(client, calls) -> object:
    """Run ``calls(client)`` in a thread; fail the test (closing the client, which ends any call
    still waiting) when it has not returned within DEADLINE seconds."""
    out: dict[str, object] = {}

    def run() -> None:
        try:
            out["result"] = calls(client)
        except BaseException as e:  # noqa: BLE001 - reported below
            out["error"] = e

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(DEADLINE)
    if t.is_alive():
        client.close()
        t.join(10)
        pytest.fail(f"the client's calls after Etcd was recreated did not finish within {DEADLINE:g}s")
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out["result"]


@pytest.mark.parametrize("meets", ["apply", "list", "append"])
def test_a_client_that_saw_a_higher_etcd_revision_is_not_held_by_it(tmp_path, caplog, monkeypatch, meets):
    """The client's first call after the recreation is its own Apply of the journal (Etcd
    commits it at a lower revision: the client forgets its own at once), a List (a broker answers
    at a lower revision: the client checks that a broker reaches its own before asking for it
    again), or an Append with no call before it (the remembered revision has not been confirmed
    for REVISION_CHECK_AFTER seconds, set to 0 here: a notebook's next cell, minutes later).
    Then an Append and a Read of the re-created journal complete with its new content, and a
    WARNING names the revision forgotten."""
    realgazette.require()
    cluster = realgazette.GazetteCluster(tmp_path, 1)
    with cluster:
        cluster.apply_specs([make_spec("went/back", store="file:///first/")])
        client = cluster.client(broker_timeout=DEADLINE)
        try:
            # Raise Etcd's revision well past where a fresh cluster will be after the re-apply.
            for i in range(40):
                spec = make_spec("went/back", store="file:///first/", labels={"round": str(i)})
                client.apply([Change(expect_mod_revision=-1, upsert=spec)])
            client.append("went/back", b'{"n":1}\n')
            assert client.read_all("went/back") == b'{"n":1}\n'
            remembered = client.conns.etcd_revision
            cluster_id = client.conns.etcd_cluster_id

            _recreate(cluster)
            second = make_spec("went/back", store="file:///second/")
            if meets != "apply":  # applied by another client, as a dev stack's set-up does
                cluster.apply_specs([second])
                with cluster.client() as other:
                    (info,) = other.list_journals("name=went/back")
                    assert info.mod_revision < remembered  # else the test would prove nothing
                    same_cluster = other.conns.etcd_cluster_id == cluster_id
            if meets == "append":
                monkeypatch.setattr(conn, "REVISION_CHECK_AFTER", 0.0)

            def calls(c):
                if meets == "apply":
                    cluster.make_store_dirs([second])
                    c.apply([Change(expect_mod_revision=0, upsert=second)])
                    cluster.wait_primaries(["went/back"])
                elif meets == "list":
                    (listed,) = c.list_journals("name=went/back")
                    assert listed.spec.fragment.stores == ["file:///second/"]
                c.append("went/back", b'{"n":2}\n')
                return c.read_all("went/back")

            with caplog.at_level(logging.WARNING, logger="pyspark_gazette.client.conn"):
                assert _finish(client, calls) == b'{"n":2}\n'
            assert 0 < client.conns.etcd_revision < remembered
            warned = [
                r.getMessage() for r in caplog.records if "no longer asks brokers for Etcd revision" in r.getMessage()
            ]
            assert len(warned) == 1 and f"Etcd revision {remembered} " in warned[0], warned
            if meets != "apply" and same_cluster:
                assert "did not reach it" in warned[0] or "without waiting" in warned[0], warned
        finally:
            client.close()
