"""gRPC's fork handlers and the quickstart's embedded broker (issue 25): with the broker's server
threads inside gRPC, every fork() of the process logged ``fork_posix.cc ... Other threads are
currently calling into gRPC, skipping fork() handlers``. The quickstart turns the handlers off
before gRPC is imported (importing :mod:`pyspark_gazette.quickstart` does); here a process does
what the quickstart's driver does, without Spark: broker up, calls made, then a fork (a process
started with a ``preexec_fn``, as PySpark launches processes)."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import subprocess, sys, tempfile
if sys.argv[1] == "quiet":
    import pyspark_gazette.quickstart  # what the quickstart's driver imports first
from pyspark_gazette.broker import EmbeddedBroker
from pyspark_gazette.client import JournalClient
with EmbeddedBroker(tempfile.mkdtemp()) as broker, JournalClient(broker.address) as client:
    client.list_journals()
    for _ in range(5):  # gRPC speaks when a fork finds its threads inside gRPC: nearly always
        subprocess.run(["true"], preexec_fn=lambda: None, check=True)
print("forked")
"""


def run(mode: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRPC_")}
    return subprocess.run(
        [sys.executable, "-c", SCRIPT, mode], capture_output=True, text=True, env=env, timeout=120, check=False
    )


def test_the_quickstart_keeps_grpc_quiet_when_the_driver_forks():
    quiet = run("quiet")
    assert quiet.returncode == 0 and quiet.stdout == "forked\n", quiet.stderr
    assert "fork" not in quiet.stderr, quiet.stderr
    # The same process without it: gRPC speaks up (what the test above guards against); under
    # load its handlers have even aborted the forked child (SIGABRT after an epoll_wait error), so
    # only the message is required here, not the exit code.
    loud = run("default")
    assert "skipping fork() handlers" in loud.stderr, loud.stderr
