"""Object-store emulators for the GCS and Azure store tests, started on free loopback ports.

* GCS: fsouza/fake-gcs-server (JSON API, uploads, XML-style downloads), built into ``.bin/`` by
  ``make emulators`` from ``tests/peers/fake-gcs-server``'s go.mod.
* Azure Blob: Azurite, installed by ``make emulators`` from npm into ``.tools/azurite``.

Each server is a child process the fixture stops by its own PID (SIGTERM, then SIGKILL), also
when the test fails. Readiness is awaited on the server's own "listening" log line.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from realgazette import free_port
from required_tools import missing_tool

ROOT = pathlib.Path(__file__).resolve().parent.parent
FAKE_GCS = ROOT / ".bin" / "fake-gcs-server"
AZURITE = ROOT / ".tools" / "azurite" / "node_modules" / ".bin" / "azurite-blob"

# Azurite's well-known development account (public, documented by Microsoft; not a secret).
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="


def require_fake_gcs() -> None:
    if not FAKE_GCS.exists():
        missing_tool("fake-gcs-server is not installed: run make emulators (needs Go)")


def require_azurite() -> None:
    if not AZURITE.exists() or shutil.which("node") is None:
        missing_tool("azurite is not installed: run make emulators (needs node and npm)")


@dataclass
class Emulator:
    proc: subprocess.Popen[bytes]
    endpoint: str  # http://127.0.0.1:PORT
    log: list[str]
    tls_endpoint: str = ""  # https://127.0.0.1:PORT, if served
    ca_file: str = ""  # the certificate of tls_endpoint

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)


def _start(argv: list[str], ready: str, endpoint: str, timeout: float = 60, cwd: str | None = None) -> Emulator:
    """Start ``argv`` and wait for a log line containing ``ready`` (or the process's exit)."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd)
    log: list[str] = []
    seen = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip()
            if len(log) < 200:
                log.append(line)
            if ready in line:
                seen.set()
        seen.set()  # EOF: the process exited

    threading.Thread(target=pump, name=f"log-{os.path.basename(argv[0])}", daemon=True).start()
    emulator = Emulator(proc, endpoint, log)
    if not seen.wait(timeout) or proc.poll() is not None:
        emulator.stop()
        raise RuntimeError(f"{argv[0]} did not start: " + " | ".join(log[-20:]))
    return emulator


@contextlib.contextmanager
def fake_gcs_server(tmpdir: str, tls: bool = False) -> Iterator[Emulator]:
    """fake-gcs-server over plain HTTP on a free loopback port, objects in memory.

    With ``tls`` it also serves HTTPS (``-scheme both``) with a fresh self-signed certificate for
    127.0.0.1: ``emulator.tls_endpoint`` and ``emulator.ca_file`` (Gazette's Go client signs
    ``https://`` URLs for its emulator host and fetches them in its store health check).
    """
    require_fake_gcs()
    last: Exception | None = None
    for _ in range(3):  # the port is picked before the server binds it: retry a lost race
        port = free_port()
        endpoint = f"http://127.0.0.1:{port}"
        tls_port = free_port() if tls else 0
        public = f"127.0.0.1:{tls_port}" if tls else f"127.0.0.1:{port}"
        argv = [
            str(FAKE_GCS),
            "-scheme=both" if tls else "-scheme=http",
            "-host=127.0.0.1",
            f"-port={tls_port}" if tls else f"-port={port}",
            "-backend=memory",
            f"-public-host={public}",
            f"-external-url={'https' if tls else 'http'}://{public}",
            "-log-level=info",
        ]
        if tls:
            cert, key = write_self_signed_cert(tmpdir)
            argv += [f"-port-http={port}", f"-cert-location={cert}", f"-private-key-location={key}"]
        try:
            emulator = _start(argv, "server started at https" if tls else "server started at", endpoint, cwd=tmpdir)
            if tls:
                emulator.tls_endpoint = f"https://127.0.0.1:{tls_port}"
                emulator.ca_file = cert
        except RuntimeError as e:
            last = e
            continue
        try:
            yield emulator
        finally:
            emulator.stop()
        return
    raise RuntimeError(f"fake-gcs-server did not start: {last}")


@contextlib.contextmanager
def azurite(tmpdir: str, tls: bool = False) -> Iterator[Emulator]:
    """Azurite's blob service over plain HTTP on a free loopback port, blobs in memory.

    With ``tls`` it serves HTTPS instead, with a fresh self-signed certificate that is also valid
    for ``devstoreaccount1.blob.core.windows.net`` (``emulator.ca_file``): Gazette's Azure store
    only talks to ``https://<account>.blob.core.windows.net``, so real brokers reach Azurite
    through :class:`ConnectProxy`.
    """
    require_azurite()
    last: Exception | None = None
    for _ in range(3):
        port = free_port()
        endpoint = f"{'https' if tls else 'http'}://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
        argv = [
            str(AZURITE),
            "--blobHost",
            "127.0.0.1",
            "--blobPort",
            str(port),
            "--inMemoryPersistence",
            "--skipApiVersionCheck",
            "--loose",
            "--disableTelemetry",
        ]
        cert = ""
        if tls:
            cert, key = write_self_signed_cert(tmpdir, f"{AZURITE_ACCOUNT}.blob.core.windows.net")
            argv += ["--cert", cert, "--key", key]
        try:
            emulator = _start(argv, "successfully listens on", endpoint, cwd=tmpdir)
            emulator.ca_file = cert
        except RuntimeError as e:
            last = e
            continue
        try:
            yield emulator
        finally:
            emulator.stop()
        return
    raise RuntimeError(f"azurite did not start: {last}")


def azurite_connection_string(endpoint: str) -> str:
    return (
        f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};BlobEndpoint={endpoint};"
    )


def gcs_create_bucket(endpoint: str, name: str) -> None:
    import json
    import urllib.request

    body = json.dumps({"name": name}).encode()
    request = urllib.request.Request(
        f"{endpoint}/storage/v1/b?project=emulator", data=body, headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        assert response.status == 200, response.status


def gcs_filesystem(endpoint: str):
    import gcsfs.core

    return gcsfs.core.GCSFileSystem(endpoint_url=endpoint, token="anon", project="emulator", skip_instance_cache=True)


def azure_service(endpoint: str):
    from azure.storage.blob import BlobServiceClient

    return BlobServiceClient.from_connection_string(azurite_connection_string(endpoint))


def azure_create_container(endpoint: str, name: str) -> None:
    with azure_service(endpoint) as service:
        service.create_container(name)


def write_service_account_key(directory: str) -> str:
    """Write a service-account key file with a fresh RSA key (for signing URLs locally)."""
    import json

    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    ).decode()
    info = {
        "type": "service_account",
        "project_id": "emulator",
        "private_key_id": "0" * 40,
        "private_key": pem,
        "client_email": "gazette-test@emulator.iam.gserviceaccount.com",
        "client_id": "1",
        "token_uri": "http://127.0.0.1:9/token",
    }
    path = os.path.join(directory, "service-account.json")
    with open(path, "w") as f:
        json.dump(info, f)
    return path


def write_self_signed_cert(directory: str, *dns_names: str) -> tuple[str, str]:
    """A fresh self-signed certificate for 127.0.0.1, localhost and ``dns_names``: (cert file,
    key file)."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [
                    x509.IPAddress(ipaddress.ip_address("127.0.0.1")),
                    *(x509.DNSName(n) for n in ("localhost", *dns_names)),
                ]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = os.path.join(directory, "emulator-cert.pem"), os.path.join(directory, "emulator-key.pem")
    with open(cert_path, "wb") as f:
        f.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(key_path, "wb") as f:
        f.write(
            key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            )
        )
    return cert_path, key_path


class ConnectProxy:
    """An HTTP CONNECT proxy on a free loopback port that tunnels every CONNECT, whatever host
    it names, to ``upstream`` (host, port): set as ``HTTPS_PROXY`` of a Go program, it sends
    ``https://<anything>`` to a local emulator (the certificate must be valid for the name)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.tunnels = 0
        self._server = socket.create_server(("127.0.0.1", 0))
        self.address = f"http://127.0.0.1:{self._server.getsockname()[1]}"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="connect-proxy", daemon=True)

    def __enter__(self) -> ConnectProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._server.close()
        self._thread.join(10)

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._tunnel, args=(conn,), daemon=True).start()

    def _tunnel(self, client: socket.socket) -> None:
        with client:
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = client.recv(4096)
                if not chunk:
                    return
                head += chunk
            if not head.startswith(b"CONNECT "):
                client.sendall(b"HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\n\r\n")
                return
            try:
                upstream = socket.create_connection(self.upstream, timeout=30)
            except OSError:
                client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                return
            self.tunnels += 1
            with upstream:
                client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
                rest = head.split(b"\r\n\r\n", 1)[1]
                if rest:
                    upstream.sendall(rest)
                pump = threading.Thread(target=_pipe, args=(upstream, client), daemon=True)
                pump.start()
                _pipe(client, upstream)
                pump.join(30)


def _pipe(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


class TlsForwarder:
    """Plain HTTP on a free loopback port, forwarded request by request to an HTTPS upstream
    whose certificate is ``ca_file``: for clients (the Azure SDK in Spark executors) that should
    not be taught a test CA. Shared-key and SAS signatures cover the path, not the host."""

    def __init__(self, upstream: tuple[str, int], ca_file: str) -> None:
        import http.client
        import http.server
        import ssl

        context = ssl.create_default_context(cafile=ca_file)
        hop = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "proxy-connection"}

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                conn = http.client.HTTPSConnection(*upstream, context=context, timeout=60)
                try:
                    headers = {k: v for k, v in self.headers.items() if k.lower() not in hop}
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                finally:
                    conn.close()
                self.send_response(resp.status, resp.reason)
                head = self.command == "HEAD"
                for k, v in resp.getheaders():
                    if k.lower() not in hop and (head or k.lower() != "content-length"):
                        self.send_header(k, v)
                if not head:
                    self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if not head:
                    self.wfile.write(data)

            do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = _handle

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.address = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, name="tls-forwarder", daemon=True)

    def __enter__(self) -> TlsForwarder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(10)
