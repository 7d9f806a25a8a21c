"""The write-head sweep of 2,000 journals on a busy machine (issue 25): a stream over 2,000
journals on the embedded broker failed to start at load ~10 with ``CancelledError: Read of
'many/p00002': gRPC CANCELLED``.

gRPC's core cancels a call that waited ``grpc.server_max_unrequested_time_in_server`` (30 s by
default) for the server to take it up, and the Python server takes calls up from one loop that
needs the GIL; the embedded broker now allows an hour, and the sweep retries a CANCELLED read
like an UNAVAILABLE one. Here the broker runs in the test's process, as in the driver of that
stream, while CPU burners (subprocesses, stopped by PID) keep both cores busy. `make test` runs
this module alone, after the parallel run (it is marked `exclusive`), so it slows no other test.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from journalspecs import make_spec
from pyspark_gazette.broker import EmbeddedBroker
from pyspark_gazette.client import Change, ClientConfig, JournalClient
from pyspark_gazette.client.heads import route_heads

#: CPU burners: `make test` runs this file alone, after the others, so it slows no other test.
pytestmark = pytest.mark.exclusive


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
        assert route_heads(client.conns, names) == expected
        assert route_heads(client.conns, names) == expected
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
        assert route_heads(client.conns, names) == {**dict.fromkeys(names, 0), "many/p00002": head}
        assert len(cancelled) == 3  # the sweep's read, write_head's read, then a RetryReader's


BUSY_BROKER = """
import sys, threading, time, tempfile
from pyspark_gazette.broker import EmbeddedBroker
from pyspark_gazette.client import Change, JournalClient
from journalspecs import make_spec
with EmbeddedBroker(tempfile.mkdtemp()) as broker, JournalClient(broker.address) as client:
    client.apply([Change(expect_mod_revision=0, upsert=make_spec(f"busy/j{i}", store="")) for i in range(4)])
    print(broker.target, flush=True)
    sys.stdin.readline()
    # A thread that keeps the GIL for 40 s at a stretch: gRPC's request loop waits that long.
    sys.setswitchinterval(40)
    def spin():
        print("spinning", flush=True)
        end = time.monotonic() + 100
        while time.monotonic() < end:
            pass
    threading.Thread(target=spin, daemon=True).start()
    sys.stdin.readline()
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_broker_takes_up_calls_that_waited_past_30_seconds():
    """The embedded broker's cause of those CANCELLEDs, made certain: its gRPC request loop is kept
    from the GIL for 40 s while four Reads arrive. gRPC cancelled the ones that waited over 30 s to
    be taken up; now every one is answered."""
    from concurrent.futures import ThreadPoolExecutor

    import grpc

    from pyspark_gazette.protocol import pb, pb_grpc

    tests = str(pathlib.Path(__file__).resolve().parents[1])
    proc = subprocess.Popen(
        [sys.executable, "-c", BUSY_BROKER],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [tests, os.environ.get("PYTHONPATH")]))},
    )
    try:
        target = proc.stdout.readline().strip()
        with grpc.insecure_channel(target) as channel:
            stub = pb_grpc.JournalStub(channel)

            def head(i: int) -> str:
                request = pb.ReadRequest(journal=f"busy/j{i}", offset=-1, metadata_only=True)
                try:
                    return pb.Status.Name(list(stub.Read(request))[0].status)
                except grpc.RpcError as e:
                    return e.code().name

            assert head(0) == "OFFSET_NOT_YET_AVAILABLE"  # connected; the journal is empty
            proc.stdin.write("spin\n")
            proc.stdin.flush()
            assert proc.stdout.readline() == "spinning\n"
            with ThreadPoolExecutor(4) as pool:
                assert list(pool.map(head, range(4))) == ["OFFSET_NOT_YET_AVAILABLE"] * 4
    finally:
        proc.kill()
        proc.wait()
