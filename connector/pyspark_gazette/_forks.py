"""gRPC's fork handlers off in every process that imports pyspark_gazette before gRPC (imported
first by the package's ``__init__``; gRPC reads the variable when it is imported). A value set
in the environment is kept.

With an embedded broker in the process, gRPC's server threads are always inside gRPC, so every
``fork()`` (PySpark launching its JVM with a ``preexec_fn``, ``os.fork``) makes gRPC log
``fork_posix.cc ... Other threads are currently calling into gRPC, skipping fork() handlers``.
Worse, its child-side handler restarts a poller whose epoll descriptor the child then closes
before ``exec``: with grpcio 1.85.3 on a busy 2-core machine that aborted one child in five, so
a driver that started the broker and then a SparkSession failed with ``JAVA_GATEWAY_EXITED``. The handlers
matter only to a child that goes on using gRPC after a fork without ``exec``.
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "0")
