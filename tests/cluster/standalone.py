"""A Spark standalone cluster from the installed pyspark: a master and workers on their own hosts.

The master runs here, bound to the test network's driver-side address; each worker runs in the
network namespace of its host (:mod:`netns`) with one core, bounded memory and an environment
built from nothing (no variable of the test process reaches it, so executors see only what the
cluster configuration gives them). Executors run the Python of a separate virtualenv that has
this project installed from a wheel of the checkout, as a user installs it on cluster nodes
(:func:`executor_python`).

Processes are started with ``bin/spark-class`` (which ``exec``\\ s the JVM, so the PID we hold is
the daemon's) and stopped by PID: :meth:`Worker.kill` SIGKILLs a worker's whole process tree
(the worker JVM, its executor JVM and the executor's Python processes), the way a host dies.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from . import netns

ROOT = pathlib.Path(__file__).resolve().parents[2]


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


# -- the executors' Python -------------------------------------------------------------------


def _requirements_key() -> str:
    """What the executor virtualenv's dependencies depend on: pyproject.toml and the Python."""
    text = (ROOT / "pyproject.toml").read_text()
    deps = re.search(r"(?ms)^dependencies = \[.*?^\]", text)
    base = getattr(sys, "_base_executable", sys.executable)
    seed = f"{deps.group(0) if deps else text}\n{base}\n{sys.version}"
    return hashlib.sha256(seed.encode()).hexdigest()[:16]


def executor_python(cache: pathlib.Path | None = None, log: Callable[[str], None] = print) -> str:
    """The Python executors run: a virtualenv with a wheel of this checkout installed.

    The virtualenv lives in ``.cluster-python/`` of the checkout (``cache``) and is made once per
    dependency set (pyspark and friends come from the installer's cache or index: with pip the
    first time takes minutes, with uv, when the dev venv has it next to its Python, seconds
    from a warm cache); every call rebuilds the wheel from the working tree and reinstalls it,
    so executors run the code under test. CI makes it ahead, while other set-up runs
    (``make cluster-python``). Returns the interpreter's path.
    """
    cache = cache or ROOT / ".cluster-python"
    cache.mkdir(exist_ok=True)
    venv, stamp = cache / "venv", cache / "venv.key"
    python = venv / "bin" / "python"
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two pytest runs of one checkout share the cache
        wheels = cache / "wheel"
        for old in wheels.glob("*.whl"):
            old.unlink()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                "-q",
                "--no-deps",
                "--no-build-isolation",
                "-w",
                str(wheels),
                str(ROOT),
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )
        (wheel,) = wheels.glob("pyspark_gazette-*.whl")
        key = _requirements_key()
        fresh = not python.exists() or not stamp.exists() or stamp.read_text() != key
        uv = _uv()
        install = _installer(python, uv)
        if fresh:
            log(f"building the executors' virtualenv in {venv} (once per dependency set)")
            subprocess.run(["rm", "-rf", str(venv)], check=True)
            base = getattr(sys, "_base_executable", sys.executable)
            subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=120)
            subprocess.run([*install, str(wheel)], check=True, capture_output=True, timeout=900)
            stamp.write_text(key)
        else:
            subprocess.run(
                [*install, "--no-deps", "--reinstall" if uv else "--force-reinstall", str(wheel)],
                check=True,
                capture_output=True,
                timeout=300,
            )
    return str(python)


def _uv() -> str | None:
    """uv beside this Python (the dev venv installs it: see the Makefile), if any."""
    uv = pathlib.Path(sys.executable).parent / "uv"
    return str(uv) if uv.exists() else None


def _installer(python: pathlib.Path, uv: str | None) -> list[str]:
    """``pip install`` into the virtualenv of ``python``: uv's when there is one, else pip's."""
    if uv:
        return [uv, "pip", "install", "-q", "--python", str(python)]
    return [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check"]


if __name__ == "__main__":  # `make cluster-python`: python -m cluster.standalone, from tests/
    print(executor_python())


# -- processes -------------------------------------------------------------------------------


def _children() -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out.setdefault(ppid, []).append(int(entry))
    return out


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (parents before children)."""
    children, out, todo = _children(), [], [pid]
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(children.get(p, []))
    return out


def parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except OSError:
        return None


def kill_tree(pid: int) -> list[int]:
    """SIGKILL ``pid`` and its descendants, by PID: the tree is frozen with SIGSTOP first (so no
    process forks a child we miss), then killed. Returns the PIDs killed."""
    seen: list[int] = []
    while True:
        new = [p for p in process_tree(pid) if p not in seen]
        if not new:
            break
        for p in new:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGSTOP)
        seen.extend(new)
    for p in seen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    return seen


def _wait_for_line(log: pathlib.Path, pattern: str, proc: subprocess.Popen, what: str, timeout: float) -> re.Match:
    """Wait until ``log`` has a line matching ``pattern`` (the daemon says it is up)."""
    regex = re.compile(pattern)
    end = time.monotonic() + timeout
    while True:
        text = log.read_text(errors="replace") if log.exists() else ""
        m = regex.search(text)
        if m:
            return m
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}:\n{text[-3000:]}")
        if time.monotonic() > end:
            raise RuntimeError(f"{what} did not start in {timeout:.0f}s:\n{text[-3000:]}")
        time.sleep(0.1)


def _daemon_env(home: pathlib.Path, conf_dir: pathlib.Path) -> dict[str, str]:
    """A cluster node's environment, from nothing: PATH, Java, Spark's directories, a HOME of
    its own (so no ~/.aws or other credentials of this machine's user are found)."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": str(home),
        "TMPDIR": str(home / "tmp"),
        "SPARK_HOME": spark_home(),
        "SPARK_CONF_DIR": str(conf_dir),
        "SPARK_DAEMON_MEMORY": "256m",
        "SPARK_DAEMON_JAVA_OPTS": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
        "LANG": "C.UTF-8",
    }
    if os.environ.get("JAVA_HOME"):
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    (home / "tmp").mkdir(parents=True, exist_ok=True)
    return env


class Worker:
    """One worker daemon on its host (network namespace); its executors are its children."""

    def __init__(self, cluster: SparkStandalone, host: str, address: str):
        self.cluster, self.host, self.address = cluster, host, address
        self.dir = cluster.dir / host
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def start(self, timeout: float = 180) -> None:
        """Start the worker and wait until the master registered it."""
        self.starts += 1
        home = self.dir / "home"
        env = _daemon_env(home, self.cluster.conf_dir)
        env["SPARK_WORKER_DIR"] = str(self.dir / "work")
        env["SPARK_LOCAL_DIRS"] = str(self.dir / "local")
        env["SPARK_LOCAL_IP"] = self.address
        log = self.dir / f"worker-{self.starts}.log"
        argv = [
            *self.cluster.net.exec_prefix(self.host),
            os.path.join(spark_home(), "bin", "spark-class"),
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            self.address,
            "--cores",
            "1",
            "--memory",
            self.cluster.worker_memory,
            "--webui-port",
            "0",
            self.cluster.master_url,
        ]
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd=self.dir)
        _wait_for_line(log, r"Successfully registered with master", self.proc, f"spark worker {self.host}", timeout)

    def kill(self) -> list[int]:
        """SIGKILL the worker, its executor and the executor's Python processes (by PID)."""
        if self.proc is None or self.proc.poll() is not None:
            return []
        killed = kill_tree(self.proc.pid)
        self.proc.wait()
        return killed

    def executor_log(self) -> str:
        """The stderr of every executor this worker ran (for failure messages)."""
        parts = [p.read_text(errors="replace")[-4000:] for p in sorted((self.dir / "work").glob("*/*/stderr"))]
        return "\n".join(parts)


class SparkStandalone:
    """A master on the network's driver-side address and one :class:`Worker` per host."""

    def __init__(self, net: netns.TestNetwork, workdir: pathlib.Path, hosts: list[str], worker_memory: str = "1g"):
        self.net, self.dir, self.worker_memory = net, workdir, worker_memory
        self.conf_dir = workdir / "conf"
        self.master: subprocess.Popen | None = None
        self.master_url = ""
        self.workers = [Worker(self, h, net.addresses[h]) for h in hosts]

    def start(self, timeout: float = 180) -> SparkStandalone:
        self.conf_dir.mkdir(parents=True, exist_ok=True)
        for w in self.workers:
            w.dir.mkdir(parents=True, exist_ok=True)
        env = _daemon_env(self.dir / "master-home", self.conf_dir)
        env["SPARK_LOCAL_IP"] = self.net.gateway
        log = self.dir / "master.log"
        argv = [
            os.path.join(spark_home(), "bin", "spark-class"),
            "org.apache.spark.deploy.master.Master",
            "--host",
            self.net.gateway,
            "--port",
            "0",
            "--webui-port",
            "0",
        ]
        try:
            with open(log, "wb") as out:
                self.master = subprocess.Popen(
                    argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out, cwd=self.dir
                )
            m = _wait_for_line(log, r"Starting Spark master at (spark://\S+)", self.master, "spark master", timeout)
            self.master_url = m.group(1)
            for w in self.workers:
                w.start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for w in self.workers:
            w.kill()
        if self.master is not None and self.master.poll() is None:
            kill_tree(self.master.pid)
            self.master.wait()

    def worker_of(self, pid: int) -> Worker:
        """The worker whose process tree holds ``pid`` (an executor's Python worker, say)."""
        p: int | None = pid
        pids = {w.pid: w for w in self.workers if w.proc is not None}
        while p and p > 1:
            if p in pids:
                return pids[p]
            p = parent_of(p)
        raise LookupError(f"process {pid} does not belong to any worker")

    def __enter__(self) -> SparkStandalone:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
