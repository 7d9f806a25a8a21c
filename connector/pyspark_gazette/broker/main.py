"""Command line entry of the broker: ``python -m pyspark_gazette.broker`` / :func:`broker_main`."""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence

from pyspark_gazette import testing
from pyspark_gazette.broker.core import DEFAULT_MIN_APPEND_RATE
from pyspark_gazette.broker.embedded import EmbeddedBroker
from pyspark_gazette.protocol.auth import KeySet

#: Environment variable holding the auth keys (Gazette's broker reads the same one).
AUTH_KEYS_ENV = "BROKER_AUTH_KEYS"

#: The line the broker prints (flushed) once it serves; group 1 is its address.
LISTENING = re.compile(r"^gazette broker listening on (http://\S+) \(data dir .*, file root .*\)$")


def spawn_broker(
    data_dir: str,
    file_root: str | None = None,
    *,
    stderr=None,
    port: int = 0,
    extra_args: Sequence[str] = (),
) -> tuple[subprocess.Popen, str]:
    """Start ``python -m pyspark_gazette.broker`` as a child process on a loopback port.

    ``port`` 0 picks a free one; pass the port of a killed broker to restart it at the same
    address. Returns the process (its stdout is a text pipe) and the broker's
    ``http://host:port`` address, once the broker serves. For tests, benchmarks and notebooks
    that need the broker in a process of its own (to kill it, or to keep it off the caller's GIL).
    """
    argv = [sys.executable, "-m", "pyspark_gazette.broker", "--listen", f"127.0.0.1:{port}", "--data-dir", data_dir]
    if file_root is not None:
        argv += ["--file-root", file_root]
    argv += list(extra_args)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    m = LISTENING.match(line)
    if m is None:
        proc.kill()
        err = proc.stderr.read() if proc.stderr is not None else ""
        raise RuntimeError(f"the broker did not start: {line!r} {err}")
    return proc, m.group(1)


def build_parser(prog: str = "python -m pyspark_gazette.broker") -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Run a single-node Gazette-compatible broker. It binds loopback (127.0.0.1) by default, "
        "so only this machine can connect; pass --listen 0.0.0.0:PORT to serve other hosts, and --auth-keys "
        "to require bearer tokens.",
    )
    p.add_argument(
        "--listen",
        default="127.0.0.1:8080",
        metavar="HOST:PORT",
        help="address to serve gRPC on (default %(default)s; port 0 = any free port)",
    )
    p.add_argument(
        "--data-dir", required=True, metavar="DIR", help="directory for spools, commit logs and journal specs"
    )
    p.add_argument(
        "--file-root", default=None, metavar="DIR", help="directory that file:/// fragment store URLs are rooted at"
    )
    p.add_argument(
        "--min-append-rate",
        type=int,
        default=DEFAULT_MIN_APPEND_RATE,
        metavar="BYTES",
        help="bytes/s an appender must sustain (default %(default)s; 0 = off)",
    )
    p.add_argument(
        "--process-suffix", default=None, help="process_id suffix reported in headers (default: unique per run)"
    )
    p.add_argument(
        "--storage-options",
        default=None,
        metavar="JSON",
        help="JSON object of extra fsspec options for fragment stores; keys may be scoped to one scheme "
        "('s3.', 'gs.', 'azure.')",
    )
    p.add_argument(
        "--grace", type=float, default=5.0, help="seconds in-flight RPCs get at shutdown (default %(default)s)"
    )
    p.add_argument(
        "--auth-keys",
        "--broker.auth-keys",
        dest="auth_keys",
        default=None,
        metavar="KEYS",
        help=f"require bearer JWTs signed with these base64 keys (separated by spaces or commas; the first signs, "
        f"all verify; AA== also admits calls without a token), as Gazette's --auth-keys. Env {AUTH_KEYS_ENV}",
    )
    p.add_argument(
        "--advertise-host",
        default=None,
        metavar="HOST",
        help="host name clients should use, when --listen binds a wildcard address (default: this host's name)",
    )
    p.add_argument("--log-level", default="WARNING", help="logging level (default %(default)s)")
    testing.add_broker_arguments(p)
    return p


def _split_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"--listen expects HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


def broker_main(argv: list[str] | None = None, *, prog: str = "python -m pyspark_gazette.broker") -> int:
    """Run the broker until SIGTERM or SIGINT; returns the process exit code."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    try:
        host, port = _split_listen(args.listen)
    except argparse.ArgumentTypeError as e:
        parser.error(str(e))
    try:
        storage_options = json.loads(args.storage_options) if args.storage_options else None
    except ValueError as e:
        parser.error(f"--storage-options: not JSON: {e}")
    auth_keys = args.auth_keys or os.environ.get(AUTH_KEYS_ENV) or None
    if auth_keys is not None:
        try:
            auth_keys = KeySet.parse(auth_keys)
        except ValueError as e:
            parser.error(f"--auth-keys: {e}")
    logging.basicConfig(
        level=args.log_level.upper(), stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    stop = threading.Event()

    def on_signal(signum, frame) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
    broker = EmbeddedBroker(
        args.data_dir,
        host=host,
        port=port,
        file_root=args.file_root,
        storage_options=storage_options,
        min_append_rate=args.min_append_rate,
        process_suffix=args.process_suffix,
        hold_dir=args.test_hold_dir,
        auth_keys=auth_keys,
        advertise_host=args.advertise_host,
    )
    try:
        try:
            broker.start()
        except (OSError, ValueError) as e:  # in use, not this host's address, an unusable data dir
            print(f"error: {e.strerror if isinstance(e, OSError) and e.strerror else e}", file=sys.stderr)
            return 1
        print(
            f"gazette broker listening on {broker.address} (data dir {args.data_dir}, file root {args.file_root or '-'})",
            flush=True,
        )
        print(f"gazette broker: {broker.exposure()}", file=sys.stderr, flush=True)
        stop.wait()
    finally:
        broker.stop(grace=args.grace)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 0
