"""moto's S3 server on the test network, recording who asked for what.

The same WSGI application ``moto.server.ThreadedMotoServer`` serves, bound to a given address
and port 0, wrapped to append ``(client address, method, path)`` of every request to
:attr:`RecordingS3Server.requests`: the tests check that fragment GETs come from the worker hosts.
"""

from __future__ import annotations

import threading

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server


class _QuietHandler(MotoRequestHandler):
    def log_request(self, *args, **kwargs) -> None:  # the requests are recorded, not logged
        pass


class RecordingS3Server:
    def __init__(self, host: str):
        self.host = host
        self.requests: list[tuple[str, str, str]] = []
        self._lock = threading.Lock()
        self._server = None
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> RecordingS3Server:
        app = DomainDispatcherApplication(create_backend_app)

        def recorded(environ, start_response):
            with self._lock:
                self.requests.append((environ.get("REMOTE_ADDR", ""), environ["REQUEST_METHOD"], environ["PATH_INFO"]))
            return app(environ, start_response)

        self._server = make_server(self.host, 0, recorded, threaded=True, request_handler=_QuietHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="moto-s3", daemon=True)
        self._thread.start()
        return self

    def gets(self, prefix: str) -> list[tuple[str, str]]:
        """(client address, path) of every GET of a key under ``/bucket/prefix``."""
        with self._lock:
            return [(addr, path) for addr, method, path in self.requests if method == "GET" and path.startswith(prefix)]

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join()
