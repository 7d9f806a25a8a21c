"""The write-head sweep of 2,000 journals on a busy machine (issue 25): a stream over 2,000
journals on the embedded broker failed to start at load ~10 with ``CancelledError: Read of
'many/p00002': gRPC CANCELLED``.

gRPC's core cancels a call that waited ``grpc.server_max_unrequested_time_in_server`` (30 s by
default) for the server to take it up, and the Python server takes calls up from one loop that
needs the GIL; the embedded broker now allows an hour, and the sweep retries a CANCELLED read
like an UNAVAILABLE one. Here the broker runs in the test's process, as in the driver of that
stream, while CPU burners (subprocesses, stopped by PID) keep both cores busy.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from journalspecs import make_spec
from pyspark_gazette.broker import EmbeddedBroker
from pyspark_gazette.client import Change, ClientConfig, JournalClient
from pyspark_gazette.client.heads import sweep_heads

JOURNALS = 2_000


@pytest.fixture
def burners():
    """CPU burners: twice as many as there are cores, killed by PID afterwards."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * (os.cpu_count() or 2))]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
        for p in procs:
            p.wait()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sweep_of_2000_journals_under_cpu_load(tmp_path, burners):
    with (
        EmbeddedBroker(str(tmp_path / "data"), file_root=str(tmp_path / "store")) as broker,
        JournalClient(ClientConfig(broker.address)) as client,
    ):
        names = [f"many/p{i:05d}" for i in range(JOURNALS)]
        client.apply_in_batches([Change(expect_mod_revision=0, upsert=make_spec(n, store="")) for n in names])
        expected = dict.fromkeys(names, 0)
        for i in range(0, JOURNALS, 97):  # some journals hold content, of different lengths
            expected[names[i]] = client.append(names[i], b'{"i": %d}\n' % i * (1 + i % 5)).end
        client.list_journals("name:prefix=many/")  # routes, as a stream's planning has them
        assert all(p.poll() is None for p in burners)  # the machine is busy throughout
        assert sweep_heads(client.conns, names) == expected
        assert sweep_heads(client.conns, names) == expected
        assert all(p.poll() is None for p in burners)


def test_sweep_retries_reads_the_broker_cancelled(tmp_path, monkeypatch):
    """A head read the broker answers with CANCELLED (what gRPC does to a call it could not take
    up in time) is asked again, as an UNAVAILABLE one is, instead of failing the sweep."""
    import grpc

    from pyspark_gazette.broker.rpc import read

    serve_read = read.serve_read
    cancelled: list[str] = []

    def flaky(core, request, context, claims):
        if request.journal == "many/p00002" and len(cancelled) < 3:
            cancelled.append(request.journal)
            context.abort(grpc.StatusCode.CANCELLED, "injected: not taken up in time")
        yield from serve_read(core, request, context, claims)

    monkeypatch.setattr(read, "serve_read", flaky)
    with (
        EmbeddedBroker(str(tmp_path / "data")) as broker,
        JournalClient(ClientConfig(broker.address)) as client,
    ):
        names = [f"many/p{i:05d}" for i in range(5)]
        client.apply_in_batches([Change(expect_mod_revision=0, upsert=make_spec(n, store="")) for n in names])
        head = client.append("many/p00002", b'{"i": 2}\n').end
        assert sweep_heads(client.conns, names) == {**dict.fromkeys(names, 0), "many/p00002": head}
        assert len(cancelled) == 3  # the sweep's read, write_head's read, then a RetryReader's
