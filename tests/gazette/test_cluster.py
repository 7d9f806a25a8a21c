"""The real-Gazette cluster fixture itself: it starts, serves our client and gazctl, and stops
every process it started, by PID, leaving no port bound."""

from __future__ import annotations

import os
import socket
import urllib.request

import pytest

import realgazette
from journalspecs import make_spec
from pyspark_gazette.protocol import pb

pytestmark = pytest.mark.slow


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); /proc says whether it is only waiting to be reaped.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def test_cluster_starts_serves_and_stops_cleanly(tmp_path):
    realgazette.require()
    cluster = realgazette.GazetteCluster(tmp_path, 3)
    with cluster:
        ids = {b.id for b in cluster.brokers}
        assert len(ids) == 3 and {b.zone for b in cluster.brokers} == {"zone-a", "zone-b"}
        assert len({b.port for b in cluster.brokers}) == 3
        spec = make_spec("fixture/check", store="file:///fixture/")
        spec.replication = 3
        cluster.apply_specs([spec])
        with cluster.client() as c:
            (info,) = c.list_journals("name=fixture/check")
            # Replication 3 over three brokers in two zones: every broker is a member.
            assert sorted(m.suffix for m in info.route.members) == sorted(ids)
            c.append("fixture/check", b'{"n":1}\n')
            assert c.read_all("fixture/check") == b'{"n":1}\n'
        listed = cluster.gazctl("journals", "list", "--format", "json").stdout.decode()
        assert "fixture/check" in listed
        pids = cluster.pids
        ports = [b.port for b in cluster.brokers] + [cluster.etcd.client_port, cluster.etcd.peer_port]
        assert all(_alive(p) for p in pids)
    # Teardown deleted the journals first, so SIGTERM was enough: nothing was left to hand off.
    assert not [p for p in pids if _alive(p)]
    assert all(realgazette.port_is_free("127.0.0.1", p) for p in ports)
    for b in cluster.brokers:
        assert "SIGKILL" not in b.log.read_text()


def test_session_cluster_fixture(gazette_cluster):
    spec = make_spec("fixture/session", store="file:///fixture/")
    gazette_cluster.apply_specs([spec])
    with gazette_cluster.client() as c:
        assert [j.name for j in c.list_journals("name=fixture/session")] == ["fixture/session"]
        c.append("fixture/session", b"x\n")
        assert c.get_journal("fixture/session").route.primary >= 0
    assert gazette_cluster.delete_journals("name=fixture/session") == 1
    with gazette_cluster.client() as c:
        assert c.list_journals("name=fixture/session") == []
    assert pb.OK == 0


def test_etcd_whose_port_was_taken_before_it_bound_starts_on_fresh_ports(tmp_path):
    """Another process may bind the port :func:`realgazette.free_port` chose before etcd does:
    the first start picks fresh ports instead of failing the test that needed a cluster."""
    realgazette.require()
    etcd = realgazette.Etcd(tmp_path / "etcd")
    taken = etcd.client_port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        try:
            etcd.start()
            assert etcd.client_port != taken
            assert "address already in use" in etcd.log.read_text()
            with urllib.request.urlopen(f"{etcd.endpoint}/health", timeout=5) as resp:
                assert resp.status == 200
        finally:
            etcd.stop()
    assert etcd.proc is not None and etcd.proc.poll() is not None
