"""open_fragment_url against a real loopback HTTP server: headers, statuses, encodings."""

from __future__ import annotations

import gzip
import hashlib
import http.server
import socket
import threading

import pytest

from pyspark_gazette.errors import FragmentNotFoundError, FragmentTooShortError, StoreError
from pyspark_gazette.fragments import FragmentReader, FragmentRef, compress_bytes, open_fragment_url
from pyspark_gazette.protocol import pb

DATA = b"".join(b'{"n": %d}\n' % i for i in range(5000))
SIGNED = "?X-Amz-Credential=AKIDSECRET&X-Amz-Signature=deadbeefcafe&X-Amz-Expires=60"


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[tuple[str, str, str]] = []

    def log_message(self, *args):
        pass

    def do_GET(self):
        Handler.seen.append((self.path.split("?")[0], self.request_version, self.headers.get("Accept-Encoding", "")))
        route = self.path.split("?")[0]
        statuses = {"/forbidden": 403, "/missing": 404, "/broken": 500, "/partial": 206}
        if route in statuses:
            self._reply(statuses[route], b"nope")
        elif route == "/gzip-encoded":
            self._reply(200, gzip.compress(DATA), {"Content-Encoding": "gzip"})
        elif route == "/transcoded":
            self._reply(200, DATA)
        elif route == "/short":
            body = compress_bytes(pb.NONE, DATA)
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body[:1000])
            self.close_connection = True
        else:
            self._reply(200, compress_bytes(pb.SNAPPY, DATA))

    def _reply(self, status, body, headers=None):
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def server():
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def ref(codec):
    return FragmentRef("j", 0, len(DATA), hashlib.sha1(DATA).hexdigest(), codec)


def test_ok_and_headers(server):
    Handler.seen.clear()
    with open_fragment_url(f"{server}/frag.sz{SIGNED}", pb.SNAPPY) as raw:
        assert FragmentReader(raw, ref(pb.SNAPPY), verify_sha1=True).read() == DATA
    with open_fragment_url(f"{server}/frag.gz", pb.GZIP) as raw:
        pass
    with open_fragment_url(f"{server}/transcoded", pb.GZIP_OFFLOAD_DECOMPRESSION) as raw:
        assert raw.content_encoding == "" and raw.codec == pb.GZIP_OFFLOAD_DECOMPRESSION
        assert FragmentReader(raw, ref(pb.GZIP_OFFLOAD_DECOMPRESSION)).read() == DATA
    assert [(v, enc) for _, v, enc in Handler.seen] == [
        ("HTTP/1.1", "gzip"),
        ("HTTP/1.1", "gzip"),
        ("HTTP/1.1", "identity"),
    ]


def test_gzip_content_encoding_for_offload_codec(server):
    with open_fragment_url(f"{server}/gzip-encoded", pb.GZIP_OFFLOAD_DECOMPRESSION) as raw:
        assert raw.content_encoding == "gzip" and raw.codec == pb.GZIP
        assert FragmentReader(raw, ref(pb.GZIP_OFFLOAD_DECOMPRESSION), 5).read() == DATA[5:]


@pytest.mark.parametrize(
    ("route", "error", "status"),
    [
        ("/forbidden", FragmentNotFoundError, "403"),
        ("/missing", FragmentNotFoundError, "404"),
        ("/broken", StoreError, "500"),
        ("/partial", StoreError, "206"),
    ],
)
def test_non_200_statuses(server, route, error, status):
    with pytest.raises(error, match=status) as info:
        open_fragment_url(f"{server}{route}{SIGNED}", pb.SNAPPY)
    text = str(info.value)
    assert "deadbeefcafe" not in text and "AKIDSECRET" not in text and "REDACTED" in text


def test_truncated_body_is_too_short(server):
    with open_fragment_url(f"{server}/short", pb.NONE) as raw:
        with pytest.raises(FragmentTooShortError):
            FragmentReader(raw, ref(pb.NONE)).read()


def test_connection_refused_is_a_store_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(StoreError, match="cannot fetch") as info:
        open_fragment_url(f"http://127.0.0.1:{port}/x{SIGNED}", pb.NONE, timeout=5)
    assert "deadbeefcafe" not in str(info.value)
