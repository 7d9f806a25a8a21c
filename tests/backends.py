"""One test, two brokers: the embedded broker and a real Gazette v0.103.0 cluster.

The ``backend`` fixture (tests/conftest.py) yields a :class:`Backend`, parametrised as
``[embedded]`` and ``[gazette]``. A test written against it uses only what both brokers offer
over the wire; the two hooks tests need beyond that (waiting for persistence, a store refresh) are
done here the way each broker allows: the embedded broker's test hooks, or by watching
ListFragments of the real cluster until Gazette has done it on its own schedule.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

#: How long real Gazette may take to persist rolled spools and to see them in a store refresh.
PERSIST_TIMEOUT = 60.0


class Backend:
    def __init__(self, kind: str, address: str, file_root: str, *, broker=None, cluster=None):
        self.kind = kind
        self.address = address
        self.file_root = file_root
        self.store_root = file_root  # the name the Spark tests use
        self.broker = broker  # EmbeddedBroker, for [embedded]
        self.cluster = cluster  # realgazette.GazetteCluster, for [gazette]

    def __repr__(self) -> str:
        return f"Backend({self.kind}, {self.address})"

    @property
    def is_gazette(self) -> bool:
        return self.kind == "gazette"

    def client(self, **kwargs):
        from pyspark_gazette.client import ClientConfig, JournalClient

        kwargs.setdefault("file_root", self.file_root)
        return JournalClient(ClientConfig(self.address, **kwargs))

    def prepare(self, specs: Iterable) -> None:
        """What an operator does before applying specs: real Gazette's file store needs each
        store's directory to exist under the file root."""
        if self.cluster is not None:
            self.cluster.make_store_dirs(list(specs))

    def create(self, client, specs: Iterable) -> None:
        """Apply new journals as an operator would: store directories first (real Gazette), the
        Applies in batches, then wait until each journal has a primary."""
        from pyspark_gazette.client import Change

        specs = list(specs)
        self.prepare(specs)
        client.apply_in_batches([Change(expect_mod_revision=0, upsert=s) for s in specs])
        self.wait_primaries([s.name for s in specs])

    def wait_primaries(self, names: Iterable[str]) -> None:
        if self.cluster is not None:
            self.cluster.wait_primaries(list(names))

    def wait_persisted(self, timeout: float = PERSIST_TIMEOUT) -> bool:
        """Wait until every rolled spool of every journal is persisted and listed with its
        backing store (all fragments but each journal's last, the open spool)."""
        if self.broker is not None:
            return self.broker.wait_persisted(timeout)
        deadline = time.monotonic() + timeout
        with self.client() as c:
            while True:
                pending = []
                for j in c.list_journals():
                    if not j.spec.fragment.stores:
                        continue
                    frags = c.list_fragments(j.name)
                    if any(not f.spec.mod_time for f in frags[:-1]):
                        pending.append(j.name)
                if not pending:
                    return True
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.2)

    def refresh(self, journal: str, timeout: float = PERSIST_TIMEOUT) -> None:
        """Make the broker re-list ``journal``'s stores. Gazette does this every
        ``refresh_interval``: wait until its listing changes."""
        if self.broker is not None:
            self.broker.refresh(journal)
            return
        with self.client() as c:
            before = [(f.spec.begin, f.spec.end, f.spec.mod_time) for f in c.list_fragments(journal)]
            deadline = time.monotonic() + timeout
            while [(f.spec.begin, f.spec.end, f.spec.mod_time) for f in c.list_fragments(journal)] == before:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{journal}: Gazette's fragment listing did not change in {timeout}s")
                time.sleep(0.2)
