"""Real Gazette as the test peer: etcd plus ``gazette serve`` brokers on loopback, and gazctl.

The binaries come from ``make gazette`` (``.bin/gazette``, ``.bin/gazctl`` at v0.103.0, and
``.bin/etcd`` 3.6: Gazette v0.103.0's etcd client refuses Debian's etcd 3.4), or with
``GAZETTE_PEER=flow`` from ``make gazette-flow`` (the Gazette commit Estuary Flow pins), or with
``GAZETTE_PEER=main`` from ``make gazette-main`` (a commit of Gazette's main branch). Every process is
started in its own session and stopped by its own PID: SIGTERM, then SIGKILL after a bounded wait.

Also runnable by hand (``make dev-cluster``): ``python tests/realgazette.py [--brokers N] [DIR]``
starts a cluster, prints its addresses and waits for Ctrl-C.
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterable, Sequence

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: The real Gazettes the tests run against, chosen by ``GAZETTE_PEER``: ``release`` (the default,
#: the newest release, built by ``make gazette``), ``flow`` (the commit Estuary Flow's go.mod pins,
#: built by ``make gazette-flow`` into .bin/gazette-flow/) or ``main`` (the commit of Gazette's main
#: branch tests/peers/gazette-main/go.mod pins, built by ``make gazette-main`` into
#: .bin/gazette-main/). All use etcd 3.6 from .bin/.
PEERS = {
    "release": ("v0.103.0", ROOT / ".bin", "make gazette"),
    "flow": ("v0.100.1-0.20250814040917-61d190beba35", ROOT / ".bin" / "gazette-flow", "make gazette-flow"),
    "main": (
        "v0.103.1-0.20260722193110-e54beb5c6e64",
        ROOT / ".bin" / "gazette-main",
        "make gazette-main",
    ),
}
PEER = os.environ.get("GAZETTE_PEER", "release")
if PEER not in PEERS:
    raise ValueError(f"GAZETTE_PEER={PEER!r}: expected one of {', '.join(PEERS)}")
GAZETTE_VERSION, _PEER_BIN, _PEER_MAKE = PEERS[PEER]
BIN = pathlib.Path(os.environ.get("GAZETTE_BIN_DIR") or _PEER_BIN)
ETCD = BIN / "etcd" if (BIN / "etcd").is_file() else ROOT / ".bin" / "etcd"

#: Journals one List response carries at most: 1,000 up to v0.103.0 (and at Flow's pin); Gazette's
#: main sends 25 since 95fb59e ("size List response chunks to fit gRPC's 32KB buffer pool tier").
LIST_JOURNALS_PER_RESPONSE = 25 if PEER == "main" else 1000
#: Whether the brokers honour ``min_etcd_revision`` of Read and Append (wait until their view of
#: Etcd reaches it): Gazette's main since ce718ad; v0.103.0 and Flow's pin drop the unknown field.
HONOURS_MIN_ETCD_REVISION = PEER == "main"

HOW_TO_GET = (
    f"run `{_PEER_MAKE}` (needs Go 1.25+ and gcc; builds gazette and gazctl {GAZETTE_VERSION} into {BIN}; "
    "`make gazette` builds etcd 3.6 into .bin/)"
)

#: How long a broker or etcd may take to come up, and to stop after SIGTERM, before we give up.
START_TIMEOUT = 60.0
STOP_TIMEOUT = 20.0
#: How long a broker may take to exit after SIGTERM in a rolling upgrade (:meth:`GazetteBroker.terminate`):
#: it hands its journals off first. Gazette's own wait for a hand-off can reach a minute (a primary
#: re-checks a route it could not sync with its new members once a minute: broker/replica.go
#: ``healthCheckInterval``), so a stuck hand-off is told apart from a slow one past 90 s.
EXIT_TIMEOUT = 90.0


def missing() -> list[str]:
    """The binaries of the real-Gazette tests that are not there."""
    gone = [name for name in ("gazette", "gazctl") if not (BIN / name).is_file()]
    return gone + ([] if ETCD.is_file() else ["etcd"])


def require() -> None:
    """Skip the calling test when real Gazette is not installed (with GAZETTE_REQUIRE_TOOLS=1, as in CI, fails it: tests/required_tools.py)."""
    from required_tools import missing_tool

    gone = missing()
    if gone:
        missing_tool(f"real Gazette is not installed ({', '.join(gone)} missing from {BIN}): {HOW_TO_GET}")


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def port_is_free(host: str, port: int) -> bool:
    """Whether nothing listens on ``host:port`` (connections left in TIME_WAIT do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def _stop_process(proc: subprocess.Popen | None, timeout: float = STOP_TIMEOUT) -> None:
    """SIGTERM ``proc`` by its PID, SIGKILL it if it has not exited within ``timeout``."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _log_tail(path: pathlib.Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


class Etcd:
    """One etcd member on free loopback ports, with its data under ``dir``."""

    def __init__(self, dir: pathlib.Path, host: str = "127.0.0.1"):
        self.dir = dir
        self.host = host
        self._take_ports()
        self.proc: subprocess.Popen | None = None
        self.log = dir / "etcd.log"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    #: How many times a first start may pick new ports because another process took one of
    #: them between :func:`free_port` and etcd's bind.
    PORT_RETRIES = 3

    def _take_ports(self) -> None:
        self.client_port = free_port(self.host)
        self.peer_port = free_port(self.host)
        self.endpoint = f"http://{self.host}:{self.client_port}"

    def start(self) -> Etcd:
        """Start etcd. A restart keeps its ports (brokers know its endpoint); a first start whose
        port was taken meanwhile ("address already in use") retries on fresh ports."""
        if self.proc is None:
            for _ in range(self.PORT_RETRIES):
                try:
                    return self._start_once()
                except RuntimeError:
                    if not self._lost_port_race():
                        raise
                    shutil.rmtree(self.dir / "etcd-data", ignore_errors=True)
                    self._take_ports()
        return self._start_once()

    def _lost_port_race(self) -> bool:
        return (
            self.proc is not None
            and self.proc.poll() is not None
            and "address already in use" in _log_tail(self.log, 5)
        )

    def _start_once(self) -> Etcd:
        peer = f"http://{self.host}:{self.peer_port}"
        argv = [
            str(ETCD),
            "--name=gz-test",
            f"--data-dir={self.dir / 'etcd-data'}",
            f"--listen-client-urls={self.endpoint}",
            f"--advertise-client-urls={self.endpoint}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=gz-test={peer}",
            "--log-level=warn",
        ]
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        _wait_http(f"{self.endpoint}/health", self.proc, self.log, "etcd")
        return self

    def stop(self) -> None:
        _stop_process(self.proc)

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


class GazetteBroker:
    """One ``gazette serve`` process. Its port is chosen by the broker on first start (read back
    from its log) and reused by :meth:`start` after a stop or kill, as a restarted host would."""

    def __init__(self, cluster: GazetteCluster, index: int):
        self.cluster = cluster
        self.index = index
        self.id = f"broker-{index}"
        self.zone = ("zone-a", "zone-b")[index % 2]
        self.port: int | None = None
        self.proc: subprocess.Popen | None = None
        self.log = cluster.dir / f"{self.id}.log"

    @property
    def address(self) -> str:
        assert self.port is not None, f"{self.id} was never started"
        return f"http://{self.cluster.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> GazetteBroker:
        c = self.cluster
        argv = [
            str(BIN / "gazette"),
            "serve",
            f"--broker.host={c.host}",
            f"--broker.id={self.id}",
            f"--broker.zone={self.zone}",
            f"--broker.file-root={c.file_root}",
            f"--etcd.address={c.etcd.endpoint}",
            f"--etcd.prefix={c.prefix}",
            # A short lease so a killed broker's journals are reassigned within seconds.
            f"--etcd.lease={c.lease}",
            "--log.level=info",
            "--log.format=text",
        ]
        if self.port is not None:
            argv.append(f"--broker.port={self.port}")
        if c.auth_keys:
            argv.append(f"--broker.auth-keys={c.auth_keys}")
        argv += list(c.broker_args)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("BROKER_", "ETCD_"))}
        env.update(c.extra_env)
        for attempt in range(3):
            start_at = self.log.stat().st_size if self.log.exists() else 0
            with open(self.log, "ab") as log:
                self.proc = subprocess.Popen(
                    argv, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
                )
            try:
                if self.port is None:
                    self.port = _wait_log_port(self.log, start_at, self.proc)
                _wait_http(f"http://{c.host}:{self.port}/debug/ready", self.proc, self.log, self.id)
                return self
            except RuntimeError:
                # Gazette gives its Etcd client a few seconds to connect and exits when that
                # fails (`failed to build Etcd client`): on a loaded machine, start it again.
                with open(self.log, "rb") as f:
                    f.seek(start_at)
                    etcd_slow = b"failed to build Etcd client" in f.read()
                if not etcd_slow or attempt == 2 or self.alive():
                    raise
        return self

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM: the broker hands its journals off, then exits (SIGKILL past ``timeout``)."""
        _stop_process(self.proc, timeout)

    def terminate(self, timeout: float = EXIT_TIMEOUT) -> float:
        """SIGTERM, as Kubernetes sends before it replaces a pod, and wait for the exit: the
        broker marks itself exiting, Gazette's allocator hands its journals to the other brokers
        and it exits once it holds none (cmd/gazette/main.go, allocator/alloc_state.go
        ``shouldExit``). Returns the seconds it took. Past ``timeout`` it is SIGKILLed and
        :class:`TimeoutError` raised, naming the broker, with its log's tail."""
        assert self.proc is not None and self.alive(), f"{self.id} is not running"
        began = time.monotonic()
        os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise TimeoutError(
                f"{self.id} did not exit within {timeout:g}s of SIGTERM (its journals were not handed off); "
                f"SIGKILLed:\n{_log_tail(self.log)}"
            ) from None
        return time.monotonic() - began

    def kill(self) -> None:
        """SIGKILL, as a crashed host: its etcd lease expires and Gazette reassigns its journals."""
        if self.alive():
            assert self.proc is not None
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def _wait_log_port(log: pathlib.Path, start_at: int, proc: subprocess.Popen) -> int:
    pattern = re.compile(rb'starting broker" endpoint="https?://[^"]*:(\d+)"')
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        with open(log, "rb") as f:
            f.seek(start_at)
            m = pattern.search(f.read())
        if m:
            return int(m.group(1))
        if proc.poll() is not None:
            raise RuntimeError(f"gazette exited with {proc.returncode} before listening:\n{_log_tail(log)}")
        time.sleep(0.05)
    raise TimeoutError(f"gazette did not log its endpoint within {START_TIMEOUT}s:\n{_log_tail(log)}")


def _wait_http(url: str, proc: subprocess.Popen, log: pathlib.Path, what: str) -> None:
    """Poll ``url`` until it answers 200: the process has no other way to say it is ready."""
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode} before it was ready:\n{_log_tail(log)}")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{what} was not ready at {url} within {START_TIMEOUT}s:\n{_log_tail(log)}")


def gazctl(
    *args: str, address: str, input: bytes | str | None = None, check: bool = True, timeout: float = 60
) -> subprocess.CompletedProcess:
    """Run ``.bin/gazctl`` with BROKER_ADDRESS=``address`` (any broker: a cluster's or the
    embedded one); with ``check``, a non-zero exit fails with gazctl's stderr."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("BROKER_")}
    env["BROKER_ADDRESS"] = address
    if isinstance(input, str):
        input = input.encode()
    proc = subprocess.run(
        [str(BIN / "gazctl"), *args], input=input, capture_output=True, env=env, timeout=timeout, check=False
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"gazctl {' '.join(args)} exited {proc.returncode}:\n{proc.stderr.decode(errors='replace')}"
        )
    return proc


class GazetteCluster:
    """etcd and ``brokers`` Gazette brokers sharing one ``--broker.file-root`` and a unique etcd
    prefix. ``auth_keys`` is passed as ``--broker.auth-keys``; ``extra_env`` is added to the
    brokers' environment (store credentials, emulator hosts); ``host`` is the address brokers bind
    and advertise."""

    def __init__(
        self,
        dir: str | os.PathLike,
        brokers: int = 3,
        *,
        auth_keys: str | None = None,
        extra_env: dict[str, str] | None = None,
        host: str = "127.0.0.1",
        lease: str = "5s",
        broker_args: Sequence[str] = (),
    ):
        self.dir = pathlib.Path(dir)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.file_root = str(self.dir / "file-root")
        pathlib.Path(self.file_root).mkdir(exist_ok=True)
        self.host = host
        self.prefix = f"/gazette-test-{uuid.uuid4().hex[:10]}"
        self.auth_keys = auth_keys
        self.extra_env = dict(extra_env or {})
        self.lease = lease
        self.broker_args = list(broker_args)
        self.etcd = Etcd(self.dir / "etcd", host)
        self.brokers = [GazetteBroker(self, i + 1) for i in range(brokers)]
        self._admin_token: str | None = None

    # -------------------------------------------------------------------- lifecycle

    def start(self) -> GazetteCluster:
        try:
            self.etcd.start()
            for b in self.brokers:
                b.start()
        except BaseException:
            self.stop(delete=False)
            raise
        return self

    def __enter__(self) -> GazetteCluster:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self, delete: bool = True) -> None:
        """Delete every journal (so brokers have nothing to hand off), SIGTERM the brokers, then
        etcd; anything still running after the bounded wait is SIGKILLed."""
        try:
            if delete and self.etcd.proc and self.etcd.proc.poll() is None and any(b.alive() for b in self.brokers):
                with contextlib.suppress(Exception):
                    self.delete_journals()
        finally:
            for b in self.brokers:
                if b.alive():
                    assert b.proc is not None
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(b.proc.pid, signal.SIGTERM)
            for b in self.brokers:
                b.stop()
            self.etcd.stop()

    @property
    def pids(self) -> list[int]:
        return [p for p in [self.etcd.pid, *(b.pid for b in self.brokers)] if p is not None]

    @property
    def address(self) -> str:
        return self.live_broker().address

    @property
    def addresses(self) -> list[str]:
        return [b.address for b in self.brokers]

    def live_broker(self) -> GazetteBroker:
        for b in self.brokers:
            if b.alive():
                return b
        raise RuntimeError("no broker of the cluster is running")

    # -------------------------------------------------------------------- clients

    def client(self, address: str | None = None, **kwargs):
        """Our client on a live broker (or on ``address``); with ``auth_keys``, authorized by a
        token of every capability."""
        from pyspark_gazette.client import ClientConfig, JournalClient

        kwargs.setdefault("file_root", self.file_root)
        if self.auth_keys and "auth_token" not in kwargs:  # brokers started with --auth-keys
            if self._admin_token is None:
                from pyspark_gazette.protocol.auth import ALL, mint_token

                self._admin_token = mint_token(self.auth_keys.split(",")[0].split()[0], ALL, ttl=24 * 3600)
            kwargs["auth_token"] = self._admin_token
        return JournalClient(ClientConfig(address or self.address, **kwargs))

    def gazctl(
        self,
        *args: str,
        input: bytes | str | None = None,
        check: bool = True,
        timeout: float = 60,
        address: str | None = None,
    ) -> subprocess.CompletedProcess:
        return gazctl(*args, address=address or self.address, input=input, check=check, timeout=timeout)

    def apply_specs(self, specs: Iterable, *, timeout: float = 30) -> None:
        """Create (or update) journals with our client's Apply, then wait until each has a primary."""
        from pyspark_gazette.client import Change

        specs = list(specs)
        self.make_store_dirs(specs)
        with self.client() as c:
            current = {j.name: j.mod_revision for j in c.list_journals()}
            c.apply_in_batches([Change(expect_mod_revision=current.get(s.name, 0), upsert=s) for s in specs])
        self.wait_primaries([s.name for s in specs], timeout=timeout)

    def make_store_dirs(self, specs: Iterable) -> None:
        """Create the directories of ``file:///`` stores under the file root, as an operator must:
        Gazette's file store fails its health check (and holds appends) when a store's directory
        does not exist."""
        from urllib.parse import urlsplit

        for spec in specs:
            for store in spec.fragment.stores:
                if store.startswith("file://"):
                    path = urlsplit(store).path.lstrip("/")
                    pathlib.Path(self.file_root, path).mkdir(parents=True, exist_ok=True)

    def wait_primaries(self, names: Sequence[str], *, timeout: float = 30) -> None:
        """Wait until every journal in ``names`` has a primary and a full route (Gazette assigns
        them asynchronously after Apply)."""
        wanted = set(names)
        deadline = time.monotonic() + timeout
        with self.client() as c:
            while True:
                routed = {
                    j.name
                    for j in c.list_journals()
                    if j.name in wanted
                    and j.route.primary >= 0
                    and len(j.route.members) >= min(j.spec.replication, len([b for b in self.brokers if b.alive()]))
                }
                if routed >= wanted:
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"journals without a primary after {timeout}s: {sorted(wanted - routed)[:10]}")
                time.sleep(0.1)

    def upgrade(self, broker: GazetteBroker, journals: Sequence[str], *, exit_timeout: float = EXIT_TIMEOUT) -> float:
        """One step of a rolling upgrade: ``broker`` gets SIGTERM and its exit is awaited
        (:meth:`GazetteBroker.terminate`), then a new process starts with the same id, port and
        etcd; it is back once it is ready, a List through it answers, and every journal of
        ``journals`` has a primary and a full route. Returns the seconds the old process took to
        exit."""
        took = broker.terminate(exit_timeout)
        broker.start()
        with self.client(broker.address) as c:
            c.list_journals()
        self.wait_primaries(journals, timeout=START_TIMEOUT)
        return took

    def delete_journals(self, selector: str | None = None) -> int:
        """Delete every journal (or those matching ``selector``); returns how many."""
        from pyspark_gazette.client import Change

        with self.client() as c:
            gone = c.list_journals(selector)
            if gone:
                c.apply_in_batches([Change(expect_mod_revision=j.mod_revision, delete=j.name) for j in gone])
        return len(gone)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description="Start a real Gazette cluster on loopback until Ctrl-C.")
    p.add_argument("dir", nargs="?", default=str(ROOT / ".gazette" / "dev-cluster"), help="data directory (wiped)")
    p.add_argument("--brokers", type=int, default=3)
    p.add_argument("--auth-keys", default=None, help="--broker.auth-keys for every broker")
    args = p.parse_args(argv)
    gone = missing()
    if gone:
        print(f"real Gazette is not installed ({', '.join(gone)}): {HOW_TO_GET}", file=sys.stderr)
        return 1
    shutil.rmtree(args.dir, ignore_errors=True)
    cluster = GazetteCluster(args.dir, args.brokers, auth_keys=args.auth_keys)
    stop = False

    def on_signal(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    with cluster:
        print(f"etcd        {cluster.etcd.endpoint} (prefix {cluster.prefix})")
        for b in cluster.brokers:
            print(f"{b.id}    {b.address} zone={b.zone} pid={b.pid}")
        print(f"file root   {cluster.file_root}")
        print(f"export BROKER_ADDRESS={cluster.address}  # for gazctl and pyspark-gazette; Ctrl-C stops")
        sys.stdout.flush()
        try:
            while not stop:
                time.sleep(0.5)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "connector"))
    sys.exit(main())
