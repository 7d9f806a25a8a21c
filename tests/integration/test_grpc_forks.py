"""gRPC's fork handlers in a process with the embedded broker: its server threads are always
inside gRPC, so every fork() logged ``fork_posix.cc ... Other threads are currently calling into
gRPC, skipping fork() handlers``, and the handlers sometimes aborted the forked child before it
could exec (a SparkSession started after the broker then failed with ``JAVA_GATEWAY_EXITED``).
Importing pyspark_gazette turns the handlers off before gRPC is imported, unless the environment
says otherwise (:mod:`pyspark_gazette._forks`). Here a process does what a notebook's driver may
do, without Spark: broker up, calls made, then forks (processes started with a ``preexec_fn``, as
PySpark launches its JVM)."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import subprocess, tempfile
from pyspark_gazette.broker import EmbeddedBroker  # the package first, as a driver imports it
from pyspark_gazette.client import JournalClient
with EmbeddedBroker(tempfile.mkdtemp()) as broker, JournalClient(broker.address) as client:
    client.list_journals()
    for _ in range(20):  # gRPC speaks when a fork finds its threads inside gRPC: nearly always
        subprocess.run(["true"], preexec_fn=lambda: None, check=True)
print("forked")
"""


def run(**grpc_env: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRPC_")}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT],
        capture_output=True,
        text=True,
        env={**env, **grpc_env},
        timeout=120,
        check=False,
    )


def test_importing_the_package_keeps_grpc_out_of_the_drivers_forks():
    quiet = run()
    assert quiet.returncode == 0 and quiet.stdout == "forked\n", quiet.stderr
    assert "fork" not in quiet.stderr, quiet.stderr


def test_a_fork_support_setting_in_the_environment_is_kept():
    # The handlers on, as the user asked: gRPC speaks up at the forks (what the test above guards
    # against). They have aborted forked children too, so only the message is required here.
    loud = run(GRPC_ENABLE_FORK_SUPPORT="1")
    assert "skipping fork() handlers" in loud.stderr, loud.stderr
