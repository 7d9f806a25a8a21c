"""A single-node Apache Kafka (KRaft, combined broker + controller) for benchmarks, from Maven Central jars.

The jars of ``kafka_2.13`` (and ``kafka-tools``) are copied with their runtime dependencies by
``mvn dependency:copy-dependencies`` on a generated pom into ``.bench-cache/kafka/`` (ignored by
git), once. :class:`KafkaBroker` formats a fresh log directory (``kafka.tools.StorageTool``),
starts ``kafka.Kafka`` on free loopback ports and stops it, by its PID, when the block ends.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import time

KAFKA_VERSION = "4.1.1"
CACHE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".bench-cache", "kafka")
POM = """<project xmlns="http://maven.apache.org/POM/4.0.0"><modelVersion>4.0.0</modelVersion>
<groupId>local.bench</groupId><artifactId>kafka-broker</artifactId><version>1</version><dependencies>
<dependency><groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId><version>{v}</version></dependency>
<dependency><groupId>org.apache.kafka</groupId><artifactId>kafka-tools</artifactId><version>{v}</version></dependency>
</dependencies></project>
"""


def kafka_jars(cache: str = CACHE, version: str = KAFKA_VERSION) -> str:
    """The classpath (``dir/*``) of Kafka ``version``'s broker, fetched from Maven Central once."""
    jars = os.path.join(cache, f"jars-{version}")
    if glob.glob(os.path.join(jars, f"kafka_2.13-{version}.jar")):
        return os.path.join(jars, "*")
    if not shutil.which("mvn"):
        raise RuntimeError("the Kafka broker's jars are fetched with Maven: install it (apt-get install maven)")
    os.makedirs(cache, exist_ok=True)
    pom = os.path.join(cache, f"pom-{version}.xml")
    with open(pom, "w") as f:
        f.write(POM.format(v=version))
    cmd = ["mvn", "-q", "-B", "-f", pom, "dependency:copy-dependencies", f"-DoutputDirectory={jars}"]
    cmd.append(f"-Dmaven.repo.local={os.path.join(cache, 'm2')}")
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if done.returncode:
        raise RuntimeError(f"{' '.join(cmd)} failed: {(done.stdout + done.stderr).strip()[-2000:]}")
    return os.path.join(jars, "*")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class KafkaBroker:
    """``with KafkaBroker(workdir, partitions=2) as k: k.bootstrap`` -- started and stopped by PID."""

    def __init__(self, workdir: str, *, partitions: int = 2, heap: str = "1g") -> None:
        self.workdir, self.partitions, self.heap = workdir, partitions, heap
        self.port, self.controller = free_port(), free_port()
        self.bootstrap = f"127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def _config(self) -> str:
        path = os.path.join(self.workdir, "server.properties")
        lines = [
            "process.roles=broker,controller",
            "node.id=1",
            f"controller.quorum.voters=1@127.0.0.1:{self.controller}",
            f"listeners=PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller}",
            f"advertised.listeners=PLAINTEXT://{self.bootstrap}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            f"log.dirs={os.path.join(self.workdir, 'logs')}",
            f"num.partitions={self.partitions}",
            "offsets.topic.replication.factor=1",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "group.initial.rebalance.delay.ms=0",
        ]
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")
        return path

    def __enter__(self) -> KafkaBroker:
        cp = kafka_jars()
        os.makedirs(self.workdir, exist_ok=True)
        config = self._config()
        java = ["java", "-cp", cp]
        uuid = subprocess.run(
            java + ["kafka.tools.StorageTool", "random-uuid"], capture_output=True, text=True, check=True
        ).stdout.split()[-1]
        fmt = java + ["kafka.tools.StorageTool", "format", "-t", uuid, "-c", config]
        done = subprocess.run(fmt, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(f"{' '.join(fmt)} failed: {(done.stdout + done.stderr).strip()[-2000:]}")
        self.log = open(os.path.join(self.workdir, "kafka.log"), "wb")
        cmd = java[:1] + [f"-Xmx{self.heap}", f"-Xms{self.heap}"] + java[1:] + ["kafka.Kafka", config]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        try:
            self._await_port(120)
        except BaseException:
            self.stop()
            raise
        return self

    def _await_port(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        assert self.proc is not None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                with open(self.log.name, "rb") as f:
                    tail = f.read()[-2000:].decode(errors="replace")
                raise RuntimeError(f"kafka.Kafka exited with {self.proc.returncode}: {tail}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"kafka.Kafka did not listen on {self.bootstrap} within {timeout:.0f} s")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()

    def __exit__(self, *exc: object) -> None:
        self.stop()
