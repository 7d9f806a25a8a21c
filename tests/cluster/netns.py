"""A private test network of Linux network namespaces: one "host" per Spark worker.

:class:`TestNetwork` creates a bridge in the test's own namespace holding the driver-side address
``10.213.N.1/24`` (the driver, the Spark master, the broker and the S3 server bind it), and one
network namespace per worker host, joined to the bridge by a veth pair and addressed
``10.213.N.2``, ``.3``, ... Traffic between the hosts is real IP over the kernel's bridge; nothing
is routed anywhere else (the namespaces have no default route). ``N`` is a /24 of 10.213.0.0/16
that no interface of this machine uses yet.

Every name carries the creating process's PID (``gzc<pid>-w1``, bridge ``gzb<pid>``, veths
``gzv<pid>w1``), so :meth:`TestNetwork.start` can remove what a killed earlier run left behind,
and :meth:`TestNetwork.stop` removes everything it made (processes still running in a namespace
must be stopped first: the caller owns them).
"""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
from collections.abc import Sequence

_PREFIX_NS = "gzc"
_PREFIX_BRIDGE = "gzb"
_PREFIX_VETH = "gzv"


class NetworkUnavailable(RuntimeError):
    """Namespaces, veths or bridges cannot be made here (no iproute2, not root, no CAP_NET_ADMIN)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise NetworkUnavailable(f"ip {' '.join(args)}: {proc.stderr.strip() or proc.returncode}")
    return proc


def unavailable_reason() -> str | None:
    """Why a :class:`TestNetwork` cannot be made here, or None if it can be tried."""
    if shutil.which("ip") is None:
        return "iproute2 (the ip command) is not installed: apt-get install iproute2"
    if os.geteuid() != 0:
        return "network namespaces cannot be created: the tests must run as root (or with CAP_NET_ADMIN)"
    return None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale() -> None:
    """Delete namespaces, bridges and veths of this module whose creating process is gone."""
    for line in _ip("netns", "list", check=False).stdout.splitlines():
        name = line.split()[0] if line.strip() else ""
        m = re.fullmatch(_PREFIX_NS + r"(\d+)-\w+", name)
        if m and not _pid_alive(int(m.group(1))):
            _ip("netns", "delete", name, check=False)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        m = re.match(r"\d+: (" + _PREFIX_BRIDGE + r"|" + _PREFIX_VETH + r")(\d+)(\w*)[@:]", line)
        if m and not _pid_alive(int(m.group(2))):
            _ip("link", "delete", m.group(1) + m.group(2) + m.group(3), check=False)


def _used_subnets() -> set[int]:
    """Third octets of 10.213.x.0/24 networks some interface or route here already uses."""
    text = _ip("-4", "addr", check=False).stdout + _ip("-4", "route", check=False).stdout
    return {int(x) for x in re.findall(r"\b10\.213\.(\d+)\.", text)}


class TestNetwork:
    """A bridge plus one namespace ("host") per name in ``hosts``; see the module docstring."""

    __test__ = False  # not a pytest test class

    def __init__(self, hosts: Sequence[str]):
        self.pid = os.getpid()
        self.host_names = list(hosts)
        self.bridge = f"{_PREFIX_BRIDGE}{self.pid}"
        self.namespaces: dict[str, str] = {h: f"{_PREFIX_NS}{self.pid}-{h}" for h in hosts}
        self.addresses: dict[str, str] = {}
        self.gateway = ""  # the bridge's address: the driver-side host
        self._made_ns: list[str] = []
        self._made_links: list[str] = []

    def start(self) -> TestNetwork:
        reason = unavailable_reason()
        if reason:
            raise NetworkUnavailable(reason)
        remove_stale()
        used = _used_subnets()
        third = next((x for x in range(200, 255) if x not in used), None) or next(
            x for x in range(1, 200) if x not in used
        )
        net = ipaddress.ip_network(f"10.213.{third}.0/24")
        hosts = list(net.hosts())
        self.gateway = str(hosts[0])
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            self._made_links.append(self.bridge)
            _ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            for i, host in enumerate(self.host_names, start=1):
                ns, veth = self.namespaces[host], f"{_PREFIX_VETH}{self.pid}{host}"[:15]
                _ip("netns", "add", ns)
                self._made_ns.append(ns)
                _ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
                self._made_links.append(veth)
                _ip("link", "set", veth, "master", self.bridge)
                _ip("link", "set", veth, "up")
                address = str(hosts[i])
                _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
                _ip("-n", ns, "link", "set", "eth0", "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                self.addresses[host] = address
        except BaseException:
            self.stop()
            raise
        return self

    def exec_prefix(self, host: str) -> list[str]:
        """argv prefix that runs a command on ``host`` (inside its namespace)."""
        return ["ip", "netns", "exec", self.namespaces[host]]

    def stop(self) -> None:
        """Remove the namespaces (their veth ends go with them), the veths and the bridge."""
        for ns in reversed(self._made_ns):
            _ip("netns", "delete", ns, check=False)
        for link in reversed(self._made_links):
            if _ip("link", "show", link, check=False).returncode == 0:
                _ip("link", "delete", link, check=False)
        self._made_ns.clear()
        self._made_links.clear()

    def __enter__(self) -> TestNetwork:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
