"""broker.timeout: a cluster that never comes back fails reads and appends with a clear error.

Both brokers (``backend``): the embedded broker stopped, or every broker of a real Gazette
cluster stopped. The client's ``broker_timeout`` is what the Spark option sets.
"""

from __future__ import annotations

import pytest

from journalspecs import make_spec
from pyspark_gazette.client import Change
from pyspark_gazette.client.append_service import AppendService
from pyspark_gazette.client.reader import RetryReader
from pyspark_gazette.errors import BrokerTimeoutError

J = "timeout/journal"


def stop_every_broker(backend) -> None:
    if backend.broker is not None:
        backend.broker.stop()
    else:
        for b in backend.cluster.brokers:
            b.kill()


def test_reads_and_appends_give_up_after_broker_timeout(backend):
    spec = make_spec(J)
    backend.prepare([spec])
    with backend.client() as c:
        c.apply([Change(expect_mod_revision=0, upsert=spec)])
    backend.wait_primaries([J])
    with backend.client(broker_timeout=1.0) as c:
        data = b'{"n":1}\n'
        c.append(J, data)
        reader = RetryReader(c.conns, J, 0, block=True)
        assert reader.read() == data
        stop_every_broker(backend)
        # A blocking read at the write head: its stream breaks, and retries find no broker.
        with pytest.raises(BrokerTimeoutError, match=f"read of '{J}' at offset {len(data)}.*broker.timeout") as info:
            reader.read()
        assert not info.value.retriable
        reader.close()
        service = AppendService(c.conns)
        pending = service.append(J, b'{"n":2}\n')
        with pytest.raises(BrokerTimeoutError, match=f"append of 8 bytes to '{J}'.*broker.timeout"):
            pending.wait()
        service.close(timeout=0)
