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


@pytest.mark.timeout(180)
def test_an_address_where_nothing_answers_fails_like_list_not_after_broker_timeout(caplog):
    """Nothing has ever answered at the address (a wrong port): appends and reads give up by
    List's rule, naming broker.address, instead of retrying for broker_timeout with a warning per
    attempt; the budget is for brokers that answered once and went away (the test above)."""
    import logging
    import socket

    from pyspark_gazette.client import JournalClient
    from pyspark_gazette.errors import BrokerUnreachableError

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    address = f"http://127.0.0.1:{port}"
    sentence = f"nothing answered at broker.address {address!r} ({{what}}: "
    with JournalClient(address, broker_timeout=3600.0) as c, caplog.at_level(logging.DEBUG, "pyspark_gazette"):
        with pytest.raises(BrokerUnreachableError) as info:
            c.append(J, b'{"n":1}\n')
        assert str(info.value).startswith(sentence.format(what=f"append to '{J}'")), info.value
        assert "check that a broker is running there and that the host and port are right" in str(info.value)
        assert not info.value.retriable
        service = AppendService(c.conns)
        with pytest.raises(BrokerUnreachableError, match="append of 8 bytes to"):
            service.append(J, b'{"n":2}\n').wait()
        service.close(timeout=0)
        with RetryReader(c.conns, J, 0) as reader, pytest.raises(BrokerUnreachableError, match=f"read of '{J}'"):
            reader.read()
        with pytest.raises(BrokerUnreachableError, match="List"):
            c.list_journals()
    retries = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not retries, [r.getMessage() for r in retries]
