"""The cluster tier: a Spark standalone cluster whose workers are hosts of a private test network.

One set-up for the whole directory (package-scoped, torn down after its last test, before any
other tier starts its local SparkSession in this process):

* :mod:`netns`: the driver-side address ``10.213.N.1`` (a bridge here) and hosts ``w1``, ``w2``
  (network namespaces) at ``.2`` and ``.3``;
* moto's S3 server on the driver-side address, recording each request's client address;
* the embedded broker as a process of its own, listening and advertising on that address with
  ``--auth-keys`` (it is reachable from other hosts), persisting to ``s3://`` at moto;
* a master here and one worker per host (one core, 1 GiB, an environment built from nothing),
  executors running a separate virtualenv that has the project installed from a wheel;
* a driver (this process) connected to ``spark://10.213.N.1:port``.

Everything the executors need comes through options: ``broker.address``, ``broker.authToken``,
``store.s3.*``. The tests in this tier check that (a read without store credentials fails on the
executors although the test process has some in its environment).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import re
import subprocess
import sys
import time
import uuid

import pytest

from pyspark_gazette.protocol.auth import ALL, mint_token
from required_tools import missing_tool

from . import netns, standalone
from .helpers import HOSTS, KEY, S3_KEYS
from .s3server import RecordingS3Server

LISTENING = re.compile(r"gazette broker listening on (http://\S+) ")


def wait_until(predicate, timeout: float, what: str, interval: float = 0.1):
    """Poll ``predicate`` until it returns something truthy; fail naming ``what`` after ``timeout``."""
    end = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


@pytest.fixture(scope="package")
def network():
    reason = netns.unavailable_reason()
    if reason:
        missing_tool(reason)
    net = netns.TestNetwork(HOSTS)
    try:
        net.start()
    except netns.NetworkUnavailable as e:
        missing_tool(f"network namespaces cannot be created: {e}")
    try:
        yield net
    finally:
        net.stop()


@pytest.fixture(scope="package")
def executor_python():
    return standalone.executor_python()


@pytest.fixture(scope="package")
def s3(network):
    import boto3

    server = RecordingS3Server(network.gateway).start()
    server.bucket = "cluster-" + uuid.uuid4().hex[:8]
    boto3.client(
        "s3",
        endpoint_url=server.endpoint,
        region_name="us-east-1",
        aws_access_key_id=S3_KEYS["store.s3.accessKeyId"],
        aws_secret_access_key=S3_KEYS["store.s3.secretAccessKey"],
    ).create_bucket(Bucket=server.bucket)
    try:
        yield server
    finally:
        server.stop()


class NetworkBroker:
    """The embedded broker in a process of its own, on the test network, requiring tokens."""

    def __init__(self, host: str, workdir: pathlib.Path, s3: RecordingS3Server):
        self.host, self.dir, self.s3 = host, workdir, s3
        self.proc: subprocess.Popen | None = None
        self.address = ""
        self.admin_token = mint_token(KEY, ALL, ttl=6 * 3600)

    def store(self, prefix: str) -> str:
        """An ``s3://`` fragment store URL at moto, as the brokers and executors see it."""
        return f"s3://{self.s3.bucket}/{prefix}/?endpoint={self.s3.endpoint}&region=us-east-1"

    def start(self) -> NetworkBroker:
        env = dict(os.environ)
        env.update(
            AWS_ACCESS_KEY_ID=S3_KEYS["store.s3.accessKeyId"],
            AWS_SECRET_ACCESS_KEY=S3_KEYS["store.s3.secretAccessKey"],
            AWS_DEFAULT_REGION="us-east-1",
        )
        argv = [sys.executable, "-m", "pyspark_gazette.broker", "--listen", f"{self.host}:0"]
        argv += ["--data-dir", str(self.dir / "data"), "--auth-keys", KEY]
        self.log = open(self.dir / "broker.log", "wb")
        self.proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=self.log, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        m = LISTENING.search(line)
        if m is None:
            self.stop()
            raise RuntimeError(f"the broker did not start: {line!r} {(self.dir / 'broker.log').read_text()[-2000:]}")
        self.address = m.group(1)
        return self

    def client(self, token: str | None = None):
        from pyspark_gazette.client import ClientConfig, JournalClient

        return JournalClient(ClientConfig(self.address, auth_token=token or self.admin_token, direct_reads=False))

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        with contextlib.suppress(AttributeError):
            self.log.close()


@pytest.fixture(scope="package")
def broker(network, s3, tmp_path_factory):
    b = NetworkBroker(network.gateway, tmp_path_factory.mktemp("cluster-broker"), s3)
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="package")
def cluster(network, executor_python, tmp_path_factory):
    c = standalone.SparkStandalone(network, tmp_path_factory.mktemp("spark-cluster"), HOSTS)
    c.start()
    c.python = executor_python
    try:
        yield c
    finally:
        c.stop()


def executor_hosts(spark) -> set[str]:
    """Hosts of the executors registered with the driver now (the driver's own entry left out)."""
    infos = spark.sparkContext._jsc.sc().statusTracker().getExecutorInfos()
    driver = spark.conf.get("spark.driver.host")
    return {info.host() for info in infos if info.host() != driver}


@pytest.fixture(scope="package")
def spark(cluster, network):
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is not None:
        pytest.fail(
            "a SparkContext already runs in this pytest process (a local one from another tier): "
            "run tests/cluster first (the default order) or in a pytest run of its own"
        )
    saved = {k: os.environ.get(k) for k in ("PYSPARK_PYTHON", "SPARK_LOCAL_IP")}
    os.environ["PYSPARK_PYTHON"] = cluster.python  # python workers: executors' and the driver's planners
    os.environ["SPARK_LOCAL_IP"] = network.gateway  # the driver JVM binds only the test network
    session = (
        SparkSession.builder.master(cluster.master_url)
        .appName("pyspark-gazette-cluster-tests")
        .config("spark.driver.host", network.gateway)
        .config("spark.driver.bindAddress", network.gateway)
        .config("spark.pyspark.python", cluster.python)
        # The workers' environment is built from nothing: the fault hooks need their switch.
        .config("spark.executorEnv.PYSPARK_GAZETTE_TESTING_HOOKS", "1")
        .config("spark.executor.memory", "512m")
        .config("spark.executor.cores", "1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    try:
        wait_until(
            lambda: executor_hosts(session) == set(network.addresses.values()), 240, "an executor on every worker"
        )
        yield session
    finally:
        session.stop()
        # pyspark keeps this process's gateway JVM for later sessions, and it was launched with
        # SPARK_LOCAL_IP and the driver address on the test network, which is gone after this
        # tier: stop it by PID so a later local session launches a fresh one.
        gateway = SparkContext._gateway
        if gateway is not None:
            proc = getattr(gateway, "proc", None)
            gateway.shutdown()
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(30)
            SparkContext._gateway = None
            SparkContext._jvm = None
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
