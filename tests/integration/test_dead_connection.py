"""A broker connection that dies without a reset reaching the client (a lost RST, a host that
vanished, a frozen process): an append in flight must notice within seconds, not at the next
HTTP/2 keepalive ping 5.5 minutes later (issue 25).

The peer is a loopback TCP proxy in front of an embedded broker; the test freezes the proxy's
connections mid-append: it stops relaying in both directions without closing anything, as a
vanished host does. The kernel still acknowledges what the client sends, so only the client's
own check can notice. The test's timeout (90 s) is what fails without that check.
"""

from __future__ import annotations

import logging
import socket
import threading

import pytest

from journalspecs import make_spec
from pyspark_gazette.broker import EmbeddedBroker
from pyspark_gazette.client import Change, ClientConfig, JournalClient
from pyspark_gazette.errors import TransportError


class FreezableProxy:
    """Relays loopback TCP connections to ``target``; :meth:`freeze` stops relaying on every
    connection open at that moment (later connections are relayed)."""

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._lock = threading.Lock()
        self._conns: list[dict] = []
        self._stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            conn = {"sockets": (client, upstream), "frozen": threading.Event()}
            with self._lock:
                self._conns.append(conn)
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst, conn), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, conn: dict) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                return
            if conn["frozen"].is_set():
                self._stop.wait()  # hold: neither relay nor read any more
                return
            if not data:
                return
            try:
                dst.sendall(data)
            except OSError:
                return

    def freeze(self) -> int:
        with self._lock:
            for conn in self._conns:
                conn["frozen"].set()
            return len(self._conns)

    def close(self) -> None:
        self._stop.set()
        self.listener.close()
        with self._lock:
            for conn in self._conns:
                for s in conn["sockets"]:
                    s.close()


@pytest.fixture
def proxied(tmp_path):
    with EmbeddedBroker(str(tmp_path / "data"), file_root=str(tmp_path / "store")) as broker:
        proxy = FreezableProxy(("127.0.0.1", broker.port))
        client = JournalClient(ClientConfig(f"http://127.0.0.1:{proxy.port}"))
        try:
            yield client, proxy
        finally:
            proxy.close()
            client.close()


@pytest.mark.timeout(90)
def test_an_append_notices_a_connection_that_stopped_answering(proxied, caplog):
    client, proxy = proxied
    spec = make_spec("dead/conn", stores=["file:///dead/"], content_type="application/x-ndjson")
    client.apply([Change(expect_mod_revision=0, upsert=spec)])

    app = client.appender("dead/conn")
    app.write(b'{"n": 1}\n')  # the Append RPC is under way on the proxied connection
    assert proxy.freeze() == 1  # one connection carries every call of the client
    with caplog.at_level(logging.WARNING, "pyspark_gazette.client.appender"):
        with pytest.raises(TransportError) as err:
            app.close()  # the commit chunk never reaches the broker: nothing of it is committed
    assert err.value.code == "UNAVAILABLE" and "stopped answering" in str(err.value), err.value
    assert any("did not answer" in r.getMessage() for r in caplog.records)

    # The dead connection was dropped: the next append opens a new one and commits, once.
    commit = client.append("dead/conn", b'{"n": 2}\n')
    assert (commit.begin, commit.end) == (0, 9)
    assert client.read_all("dead/conn") == b'{"n": 2}\n'
