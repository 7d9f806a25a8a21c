"""A tiny HTTP proxy in front of moto's S3 server that fails chosen GETs on demand.

moto cannot throttle or fail on request, so tests point a reader's S3 endpoint at this proxy:
every request is forwarded unchanged to moto, except that while ``fail_next(n, ...)`` has
failures left, GETs whose path contains ``match`` get an S3-style error response instead
(``503 SlowDown`` by default, as S3 throttles; ``500 InternalError`` on request). moto does not
check signatures, so the Host header the client signed for the proxy does no harm.
"""

from __future__ import annotations

import http.client
import http.server
import threading
import urllib.parse

ERRORS = {
    503: ("SlowDown", "Please reduce your request rate."),
    500: ("InternalError", "We encountered an internal error. Please try again."),
}
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}


class FaultProxy:
    """Forwards to ``upstream`` (``http://host:port``) on a port-0 loopback socket."""

    def __init__(self, upstream: str):
        target = urllib.parse.urlsplit(upstream)
        self._upstream = (target.hostname or "127.0.0.1", target.port or 80)
        self._lock = threading.Lock()
        self._left = 0
        self._status = 503
        self._match = ""
        self.failed = 0  # error responses sent
        self.forwarded_gets = 0  # GETs of matching paths passed through to moto
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:  # keep test output clean
                pass

            def _handle(self) -> None:
                body = self._body()
                status = proxy._take_failure(self.command, self.path)
                if status:
                    code, message = ERRORS[status]
                    payload = (
                        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                        f"<Message>{message}</Message><RequestId>fault-proxy</RequestId></Error>"
                    ).encode()
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    if self.command != "HEAD":
                        self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection(*proxy._upstream, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                    headers["Content-Length"] = str(len(body))
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                self.send_response(resp.status, resp.reason)
                head = self.command == "HEAD"  # keeps the object's Content-Length, has no body
                for k, v in resp.getheaders():
                    if k.lower() not in _HOP_BY_HOP and (head or k.lower() != "content-length"):
                        self.send_header(k, v)
                if not head:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = bytearray()
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass
                            return bytes(out)
                        out += self.rfile.read(size)
                        self.rfile.readline()
                length = int(self.headers.get("Content-Length") or 0)
                return self.rfile.read(length) if length else b""

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _handle

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-fault-proxy", daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def fail_next(self, n: int, match: str, status: int = 503) -> None:
        """Fail the next ``n`` GETs whose path contains ``match`` with ``status``."""
        with self._lock:
            self._left, self._match, self._status = n, match, status

    def _take_failure(self, method: str, path: str) -> int:
        with self._lock:
            if method != "GET" or not self._match or self._match not in urllib.parse.unquote(path):
                return 0
            if self._left > 0:
                self._left -= 1
                self.failed += 1
                return self._status
            self.forwarded_gets += 1
            return 0

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
