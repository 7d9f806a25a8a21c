"""A real Spark Connect server in a child process, for the tests over Connect.

The server is ``spark-submit --class SparkConnectServer`` from the pyspark pip package, with
master ``local[2]``, on a loopback port the server picks itself (``binding.port=0``): the
bound port is read from the server's own "started at" log line, so there is neither a fixed
port nor a pick-then-release race. The server's Python workers run this interpreter, which has
the project installed, exactly as a Databricks cluster must have the package installed.

The JVM and its Python workers form one process group, killed as a whole on stop.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
#: The line the server logs once its gRPC service is bound (SparkConnectServer.scala).
STARTED = re.compile(r"Spark Connect server started at: (?P<host>[^\s:]+):(?P<port>\d+)")
#: Only the readiness line at INFO; everything else at WARN, to keep the pipe quiet.
LOG4J = """\
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p %c{1}: %m%n%ex
logger.connect.name = org.apache.spark.sql.connect.service.SparkConnectServer
logger.connect.level = info
"""
#: Client-side Connect state that must not leak into the server's environment.
CLIENT_ENV = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE", "SPARK_API_MODE")


class ConnectServerError(RuntimeError):
    """The server exited or never logged its address; carries the tail of its log."""


class ConnectServer:
    """Start with :meth:`start`, connect to :attr:`url`, :meth:`stop` when done."""

    def __init__(self, workdir: Path, *, env: dict[str, str] | None = None, conf: dict[str, str] | None = None):
        self.workdir = workdir
        self.extra_env = dict(env or {})
        self.conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": "0",
            "spark.ui.enabled": "false",
            "spark.sql.shuffle.partitions": "2",
            "spark.sql.session.timeZone": "UTC",
            "spark.python.worker.reuse": "true",
            "spark.local.dir": str(workdir / "local"),
            "spark.sql.warehouse.dir": str(workdir / "warehouse"),
            **(conf or {}),
        }
        self.proc: subprocess.Popen[str] | None = None
        self.address: tuple[str, int] | None = None
        self.log: deque[str] = deque(maxlen=200)
        self._ready = threading.Event()
        self._drain: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self.address is not None, "server not started"
        return f"sc://{self.address[0]}:{self.address[1]}"

    def command(self) -> list[str]:
        from pyspark.find_spark_home import _find_spark_home

        log4j = self.workdir / "log4j2.properties"
        log4j.write_text(LOG4J)
        cmd = [
            os.path.join(_find_spark_home(), "bin", "spark-submit"),
            "--class",
            SERVER_CLASS,
            "--master",
            "local[2]",
            "--name",
            "pyspark-gazette-connect-tests",
            "--driver-java-options",
            f"-Dlog4j2.configurationFile=file:{log4j}",
        ]
        for key, value in self.conf.items():
            cmd += ["--conf", f"{key}={value}"]
        return cmd

    def environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in CLIENT_ENV}
        env["PYSPARK_PYTHON"] = sys.executable
        env["PYSPARK_DRIVER_PYTHON"] = sys.executable
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = 180.0) -> ConnectServer:
        (self.workdir / "local").mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            self.command(),
            cwd=self.workdir,  # Derby and other relative paths land here
            env=self.environment(),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # one process group: the JVM and its Python workers
        )
        self._drain = threading.Thread(target=self._read_log, name="connect-server-log", daemon=True)
        self._drain.start()
        # The drain thread sets the event on the readiness line, and also at EOF (server died).
        if not self._ready.wait(timeout) or self.address is None:
            tail = "\n".join(self.log)
            self.stop()
            raise ConnectServerError(f"Spark Connect server not ready within {timeout}s:\n{tail}")
        return self

    def _read_log(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:  # drained to the end so the JVM never blocks on the pipe
            self.log.append(line.rstrip("\n"))
            m = STARTED.search(line)
            if m and self.address is None:
                self.address = (m["host"], int(m["port"]))
                self._ready.set()
        self._ready.set()

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM to the process group (Spark's shutdown hooks run), SIGKILL if it lingers."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session: the group id is the leader's pid
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout)
                break
            except subprocess.TimeoutExpired:
                continue
        if self._drain is not None:
            self._drain.join(timeout)
        # Python workers may outlive the JVM by a moment; none may be left behind.
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc = None
