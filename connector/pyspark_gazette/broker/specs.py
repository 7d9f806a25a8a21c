"""Journal spec validation (Gazette's rules) and the broker's durable spec registry.

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
from pyspark_gazette.broker.fragment import postfix
from pyspark_gazette.broker.headers import ClusterState, new_nonzero_id
from pyspark_gazette.errors import SpecError
from pyspark_gazette.fragments import parse_store_url
from pyspark_gazette.protocol import journal_names as protocol_journals
from pyspark_gazette.protocol import pb
from pyspark_gazette.protocol.durations import duration_seconds
from pyspark_gazette.protocol.journal_names import base_journal
from pyspark_gazette.protocol.labels import validate_spec_labels

MIN_FRAGMENT_LENGTH, MAX_FRAGMENT_LENGTH = 1024, 1 << 34
MIN_REFRESH, MAX_REFRESH = 1.0, 24 * 3600.0
MIN_FLUSH = 60.0
VALID_FLAGS = {0, 1, 2, 4}

O_RDONLY, O_WRONLY, O_RDWR = 1, 2, 4


def validate_journal_name(name: str) -> None:
    """Gazette's journal-name rules (:mod:`pyspark_gazette.protocol.journal_names`), plus the broker's
    store-safety rule: a clean name may still begin with ``..``, which would climb out of a store's prefix."""
    protocol_journals.validate_journal_name(name)
    if name == ".." or name.startswith("../"):
        raise SpecError(f"invalid journal name {name!r}: must not begin with '..'")


def check_journal_field(name: str, context: grpc.ServicerContext) -> None:
    """Abort (gRPC UNKNOWN, as Gazette) unless ``name`` (``;meta`` stripped) is a valid journal name.

    Gazette validates the journal of Read, Append and ListFragments requests before resolving
    it (a malformed name is a request error, not JOURNAL_NOT_FOUND).
    """
    try:
        validate_journal_name(base_journal(name))
    except SpecError as e:
        context.abort(grpc.StatusCode.UNKNOWN, f"journal: {e}")


def _validate_labels(labels: pb.LabelSet) -> None:
    try:
        validate_spec_labels(labels)
    except ValueError as e:
        raise SpecError(f"labels: {e}") from e


def _validate_store(url: str) -> None:
    if not url.endswith("/") and "?" not in url:
        raise SpecError(f"fragment store {url!r}: path must end in '/'")

    try:
        parse_store_url(url)
    except ValueError as e:
        raise SpecError(f"fragment store {url!r}: {e}") from e


def _check_replication(spec: pb.JournalSpec) -> None:
    if not 1 <= spec.replication <= 5:
        raise SpecError(f"journal {spec.name!r}: replication must be 1..5 (got {spec.replication})")


def _check_labels(spec: pb.JournalSpec) -> None:
    _validate_labels(spec.labels)


def _check_length(spec: pb.JournalSpec) -> None:
    frag = spec.fragment
    if not MIN_FRAGMENT_LENGTH <= frag.length <= MAX_FRAGMENT_LENGTH:
        raise SpecError(
            f"journal {spec.name!r}: fragment.length must be {MIN_FRAGMENT_LENGTH}..{MAX_FRAGMENT_LENGTH} (got {frag.length})"
        )


def _check_codec(spec: pb.JournalSpec) -> None:
    frag = spec.fragment
    if frag.compression_codec not in (pb.NONE, pb.GZIP, pb.ZSTANDARD, pb.SNAPPY, pb.GZIP_OFFLOAD_DECOMPRESSION):
        raise SpecError(f"journal {spec.name!r}: fragment.compression_codec must be a valid codec other than INVALID")


def _check_stores(spec: pb.JournalSpec) -> None:
    frag = spec.fragment
    for url in frag.stores:
        _validate_store(url)
    if frag.stores and frag.stores[0].startswith("file:") and frag.compression_codec == pb.GZIP_OFFLOAD_DECOMPRESSION:
        raise SpecError(f"journal {spec.name!r}: GZIP_OFFLOAD_DECOMPRESSION is not supported by file:// stores")


def _check_intervals(spec: pb.JournalSpec) -> None:
    refresh = duration_seconds(spec.fragment.refresh_interval)
    if not MIN_REFRESH <= refresh <= MAX_REFRESH:
        raise SpecError(f"journal {spec.name!r}: fragment.refresh_interval must be 1s..24h (got {refresh:g}s)")


def _check_flush(spec: pb.JournalSpec) -> None:
    flush = duration_seconds(spec.fragment.flush_interval)
    if flush != 0 and flush < MIN_FLUSH:
        raise SpecError(f"journal {spec.name!r}: fragment.flush_interval must be 0 or at least 1m (got {flush:g}s)")


def _check_postfix(spec: pb.JournalSpec) -> None:
    try:
        postfix.check_template(spec.fragment.path_postfix_template, spec.name)
    except ValueError as e:
        raise SpecError(f"journal {spec.name!r}: fragment.path_postfix_template: {e}") from e


def _check_rest(spec: pb.JournalSpec) -> None:
    if spec.flags not in VALID_FLAGS:
        raise SpecError(f"journal {spec.name!r}: flags must be one of 0, 1, 2, 4 (got {spec.flags})")


def _check_rate(spec: pb.JournalSpec) -> None:
    if spec.max_append_rate < 0:
        raise SpecError(f"journal {spec.name!r}: max_append_rate must be >= 0 (got {spec.max_append_rate})")


def _check_suspend(spec: pb.JournalSpec) -> None:
    if spec.HasField("suspend") and spec.suspend.level not in (0, 1, 2):
        raise SpecError(f"journal {spec.name!r}: suspend.level {spec.suspend.level} is not valid")


#: The checks of a spec, in the order Gazette's JournalSpec.Validate makes them.
_SPEC_CHECKS = (
    lambda spec: validate_journal_name(spec.name),
    _check_replication,
    _check_labels,
    _check_length,
    _check_codec,
    _check_stores,
    _check_intervals,
    _check_flush,
    _check_postfix,
    _check_rest,
    _check_rate,
    _check_suspend,
)


def spec_problems(spec: pb.JournalSpec) -> list[SpecError]:
    """Every problem of ``spec``, in order (empty when it is valid): clients show them all at once."""
    problems = []
    for check in _SPEC_CHECKS:
        try:
            check(spec)
        except SpecError as e:
            problems.append(e)
    return problems


def validate_spec(spec: pb.JournalSpec) -> None:
    """Raise :class:`SpecError` (message says what and why) unless ``spec`` is complete and valid.

    Like Gazette's broker, only the first problem is reported; :func:`spec_problems` lists all."""
    problems = spec_problems(spec)
    if problems:
        raise problems[0]


def validate_apply(req: pb.ApplyRequest) -> None:
    """Validate an ApplyRequest's shape and every upserted spec (raises :class:`SpecError`)."""
    if not req.changes:
        raise SpecError("expected at least one change")
    seen: set[str] = set()
    for i, change in enumerate(req.changes):
        has_upsert, has_delete = change.HasField("upsert"), bool(change.delete)
        if has_upsert == has_delete:
            raise SpecError(f"changes[{i}]: expected exactly one of upsert or delete")
        if has_upsert:
            validate_spec(change.upsert)
            name = change.upsert.name
            if change.expect_mod_revision < -1:
                raise SpecError(f"changes[{i}]: invalid expect_mod_revision {change.expect_mod_revision}")
        else:
            name = change.delete
            validate_journal_name(name)
            if change.expect_mod_revision == 0 or change.expect_mod_revision < -1:
                raise SpecError(f"changes[{i}]: delete of {name!r} needs expect_mod_revision > 0 or -1")
        if name in seen:
            raise SpecError(f"changes[{i}]: journal {name!r} appears more than once")
        seen.add(name)


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
