"""The broker's durable spec registry, and its own rules on top of Gazette's
(:mod:`pyspark_gazette.protocol.specs`): journal names that would leave a store's prefix.

There is no Etcd behind the embedded broker: :class:`SpecRegistry` keeps every JournalSpec
with its mod/create revision, plus the cluster identity, in ``<data_dir>/specs.json``. Every
change is written to a temporary file, fsynced and renamed over the old one (then the directory
is fsynced), so a crash leaves either the old or the new registry, never a mix.
"""

from __future__ import annotations

import base64
import json
import os
import threading
from dataclasses import dataclass

import grpc

from pyspark_gazette._fs import fsync_dir
from pyspark_gazette.broker.headers import ClusterState, new_nonzero_id
from pyspark_gazette.errors import SpecError
from pyspark_gazette.protocol import journal_names as protocol_journals
from pyspark_gazette.protocol import pb, specs
from pyspark_gazette.protocol.journal_names import base_journal


def validate_journal_name(name: str) -> None:
    """Gazette's journal-name rules (:mod:`pyspark_gazette.protocol.journal_names`), plus the broker's
    store-safety rule: a clean name may still begin with ``..``, which would climb out of a store's prefix."""
    protocol_journals.validate_journal_name(name)
    if name == ".." or name.startswith("../"):
        raise SpecError(f"invalid journal name {name!r}: must not begin with '..'")


def validate_apply(req: pb.ApplyRequest) -> None:
    """Gazette's ApplyRequest rules (:func:`pyspark_gazette.protocol.specs.validate_apply`) with the
    broker's journal-name rule."""
    specs.validate_apply(req, name_rule=validate_journal_name)


def check_journal_field(name: str, context: grpc.ServicerContext) -> None:
    """Abort (gRPC UNKNOWN, as Gazette) unless ``name`` (``;meta`` stripped) is a valid journal name.

    Gazette validates the journal of Read, Append and ListFragments requests before resolving
    it (a malformed name is a request error, not JOURNAL_NOT_FOUND).
    """
    try:
        validate_journal_name(base_journal(name))
    except SpecError as e:
        context.abort(grpc.StatusCode.UNKNOWN, f"journal: {e}")


@dataclass(frozen=True)
class SpecEntry:
    spec: pb.JournalSpec
    mod_revision: int
    create_revision: int


def atomic_write(path: str, data: bytes) -> None:
    """Write ``data`` to ``path`` via temp file + fsync + rename + directory fsync."""
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(path) or ".")


class SpecRegistry:
    """Journal specs and cluster state, persisted atomically in ``<data_dir>/specs.json``."""

    FILE = "specs.json"

    def __init__(self, data_dir: str):
        self.path = os.path.join(data_dir, self.FILE)
        self.lock = threading.RLock()
        self.entries: dict[str, SpecEntry] = {}
        if os.path.exists(self.path):
            with open(self.path, "rb") as f:
                doc = json.loads(f.read())
            self.state = ClusterState(
                cluster_id=doc["cluster_id"],
                member_id=doc["member_id"],
                raft_term=doc["raft_term"] + 1,
                revision=doc["revision"],
            )
            for name, e in doc["journals"].items():
                spec = pb.JournalSpec.FromString(base64.b64decode(e["spec"]))
                self.entries[name] = SpecEntry(spec, e["mod_revision"], e["create_revision"])
        else:
            self.state = ClusterState(cluster_id=new_nonzero_id(), member_id=new_nonzero_id(), raft_term=1, revision=1)
        self._save()

    def _save(self) -> None:
        doc = {
            "cluster_id": self.state.cluster_id,
            "member_id": self.state.member_id,
            "raft_term": self.state.raft_term,
            "revision": self.state.revision,
            "journals": {
                name: {
                    "spec": base64.b64encode(e.spec.SerializeToString(deterministic=True)).decode(),
                    "mod_revision": e.mod_revision,
                    "create_revision": e.create_revision,
                }
                for name, e in sorted(self.entries.items())
            },
        }
        atomic_write(self.path, json.dumps(doc, indent=1).encode())

    def get(self, name: str) -> SpecEntry | None:
        with self.lock:
            return self.entries.get(name)

    def snapshot(self) -> tuple[int, list[SpecEntry]]:
        with self.lock:
            return self.state.revision, [self.entries[n] for n in sorted(self.entries)]

    def apply(self, changes: list[pb.ApplyRequest.Change]) -> tuple[bool, int, list[str], list[str]]:
        """Apply ``changes`` as one transaction.

        Returns ``(ok, revision, upserted names, deleted names)``; ``ok`` is False (and nothing
        changed) when an expect_mod_revision compare fails.
        """
        with self.lock:
            for c in changes:
                name = c.upsert.name if c.HasField("upsert") else c.delete
                current = self.entries.get(name)
                if c.expect_mod_revision == -1:
                    continue
                have = current.mod_revision if current else 0
                if have != c.expect_mod_revision:
                    return False, self.state.revision, [], []
            revision = self.state.revision + 1
            new_entries = dict(self.entries)
            upserted, deleted = [], []
            for c in changes:
                if c.HasField("upsert"):
                    name = c.upsert.name
                    old = new_entries.get(name)
                    spec = pb.JournalSpec()
                    spec.CopyFrom(c.upsert)
                    new_entries[name] = SpecEntry(spec, revision, old.create_revision if old else revision)
                    upserted.append(name)
                else:
                    new_entries.pop(c.delete, None)
                    deleted.append(c.delete)
            self.entries = new_entries
            self.state.revision = revision
            self._save()
            return True, revision, upserted, deleted

    def update_spec(self, spec: pb.JournalSpec) -> int:
        """Replace one spec outside of Apply (e.g. resuming a suspended journal); returns the revision."""
        with self.lock:
            old = self.entries[spec.name]
            self.state.revision += 1
            self.entries = dict(self.entries)
            self.entries[spec.name] = SpecEntry(spec, self.state.revision, old.create_revision)
            self._save()
            return self.state.revision
