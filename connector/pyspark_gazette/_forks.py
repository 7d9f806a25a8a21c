"""gRPC's fork handlers off for the ``pyspark-gazette`` command and the quickstart (imported first
by :mod:`pyspark_gazette.cli` and :mod:`pyspark_gazette.quickstart`, before they import gRPC,
which reads the variable when it is imported).

With an embedded broker in the process (``quickstart``, ``broker``) gRPC's server threads are
always inside gRPC, so every ``fork()`` (PySpark launching a process with a ``preexec_fn``,
``os.fork``) made gRPC log ``fork_posix.cc ... Other threads are currently calling into gRPC,
skipping fork() handlers`` and the child an ``epoll_wait error``. The handlers matter only to a
child that goes on using gRPC after a fork without exec, which the command never does. A value
set in the environment is kept.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
