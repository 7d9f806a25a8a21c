"""Spool files: the durable local tail of a journal, and their crash recovery.

A spool is one local fragment. It lives in two files in the journal's state directory:

* ``<begin>.data`` holds the raw content bytes of ``[begin, end)``, so a read is a ``pread``;
* ``<begin>.log`` holds one commit record per acknowledged append: the new end offset, the
  SHA1 of the spool's content up to that end, the registers after the append, the spool's
  codec and its first-append time. Records are framed ``magic | length | crc32 | payload``.

An append writes its chunks into the data file as they arrive, without syncing. At commit the
record is handed to the :class:`~pyspark_gazette.broker.fragment.syncer.Syncer`, which syncs the data file,
then writes and syncs the log. Only then is the append acknowledged and made visible to readers.
Recovery keeps the last valid record and truncates both files to it, so the bytes of an append
that was never acknowledged (a torn tail) are dropped and nothing unacknowledged is ever visible.
"""

from __future__ import annotations

import hashlib
import os
import struct
import zlib
from dataclasses import dataclass

from pyspark_gazette._fs import fsync_dir
from pyspark_gazette.protocol import pb

_MAGIC = 0x475A5350  # "GZSP"
_FRAME = struct.Struct("<III")
_FIXED = struct.Struct("<qdi20s")
EMPTY_DIGEST = b"\x00" * 20


@dataclass(frozen=True)
class CommitRecord:
    """Durable state of a spool after one acknowledged append."""

    end: int
    first_append_time: float  # Unix seconds; 0 until the first non-empty append
    codec: int
    digest: bytes  # SHA1 of [begin, end); all zero while empty
    registers: bytes  # serialized pb.LabelSet

    def encode(self) -> bytes:
        payload = _FIXED.pack(self.end, self.first_append_time, self.codec, self.digest) + self.registers
        return _FRAME.pack(_MAGIC, len(payload), zlib.crc32(payload)) + payload

    def registers_proto(self) -> pb.LabelSet:
        return pb.LabelSet.FromString(self.registers)


def _read_records(path: str) -> tuple[list[CommitRecord], int]:
    """Parse valid records from the start of a log; returns them and the valid length."""
    with open(path, "rb") as f:
        raw = f.read()
    records, pos = [], 0
    while pos + _FRAME.size <= len(raw):
        magic, length, crc = _FRAME.unpack_from(raw, pos)
        start = pos + _FRAME.size
        payload = raw[start : start + length]
        if magic != _MAGIC or len(payload) != length or length < _FIXED.size or zlib.crc32(payload) != crc:
            break
        end, fat, codec, digest = _FIXED.unpack_from(payload)
        records.append(CommitRecord(end, fat, codec, digest, bytes(payload[_FIXED.size :])))
        pos = start + length
    return records, pos


def spool_paths(directory: str, begin: int) -> tuple[str, str]:
    stem = os.path.join(directory, f"{begin:016x}")
    return stem + ".data", stem + ".log"


def list_spool_begins(directory: str) -> list[int]:
    """Begin offsets of the spools found in a journal state directory, ascending."""
    begins = set()
    for name in os.listdir(directory):
        stem, ext = os.path.splitext(name)
        if ext in (".data", ".log") and len(stem) == 16:
            try:
                begins.add(int(stem, 16))
            except ValueError:
                continue
    return sorted(begins)


class Spool:
    """One local fragment of a journal: content file, commit log and running SHA1.

    Offsets and state fall in two groups. ``seq_*`` is the *sequenced* state, moved by the
    appender holding the journal's append lock (content written, not yet durable). ``durable``
    is the last record the syncer made durable; readers and the index only ever see that.
    """

    def __init__(
        self, journal: str, directory: str, begin: int, durable: CommitRecord, sha1, data_fd: int, log_fd: int
    ):
        self.journal = journal
        self.directory = directory
        self.begin = begin
        self.data_path, self.log_path = spool_paths(directory, begin)
        self.durable = durable
        self.codec = durable.codec
        self.first_append_time = durable.first_append_time
        self.seq_end = durable.end
        self._sha1 = sha1
        self._data_fd = data_fd
        self._log_fd = log_fd
        self.pending: list[CommitRecord] = []  # guarded by the syncer's lock
        self.rolled = False
        self.failed: BaseException | None = None

    # ---------------------------------------------------------------- creation and recovery

    @classmethod
    def create(cls, journal: str, directory: str, begin: int, codec: int, registers: bytes) -> Spool:
        """Create an empty spool with an initial durable record carrying ``registers``."""
        data_path, log_path = spool_paths(directory, begin)
        data_fd = os.open(data_path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        log_fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        rec = CommitRecord(begin, 0.0, codec, EMPTY_DIGEST, registers)
        os.write(log_fd, rec.encode())
        os.fdatasync(log_fd)
        fsync_dir(directory)
        return cls(journal, directory, begin, rec, hashlib.sha1(), data_fd, log_fd)

    @classmethod
    def recover(cls, journal: str, directory: str, begin: int) -> Spool | None:
        """Reopen a spool after a restart, truncating any unacknowledged tail.

        Returns None (and removes the files) when the spool has no valid record, which happens
        only if the broker died while creating it.
        """
        data_path, log_path = spool_paths(directory, begin)
        records, valid = _read_records(log_path) if os.path.exists(log_path) else ([], 0)
        if not records:
            for p in (data_path, log_path):
                if os.path.exists(p):
                    os.unlink(p)
            return None
        rec = records[-1]
        size = rec.end - begin
        data_fd = os.open(data_path, os.O_RDWR | os.O_CREAT, 0o644)
        if os.fstat(data_fd).st_size < size:
            os.close(data_fd)
            raise OSError(f"spool {data_path} is shorter than its last commit record ({size} bytes): data was lost")
        os.ftruncate(data_fd, size)
        sha1 = hashlib.sha1()
        pos = 0
        while pos < size:
            block = os.pread(data_fd, min(1 << 22, size - pos), pos)
            sha1.update(block)
            pos += len(block)
        digest = sha1.digest() if size else EMPTY_DIGEST
        if digest != rec.digest:
            os.close(data_fd)
            raise OSError(f"spool {data_path}: content SHA1 does not match its commit record")
        os.fsync(data_fd)
        log_fd = os.open(log_path, os.O_WRONLY | os.O_APPEND)
        os.ftruncate(log_fd, valid)
        os.fsync(log_fd)
        return cls(journal, directory, begin, rec, sha1, data_fd, log_fd)

    # ---------------------------------------------------------------- the append path

    def sha1_state(self):
        """A copy of the running SHA1, taken before an append so it can be rolled back."""
        return self._sha1.copy()

    def write(self, data: bytes) -> None:
        """Write one chunk at the sequenced end (appender only)."""
        view = memoryview(data)
        pos = self.seq_end - self.begin
        while view:
            n = os.pwrite(self._data_fd, view, pos)
            view, pos = view[n:], pos + n
        self._sha1.update(data)
        self.seq_end += len(data)

    def rollback(self, end: int, sha1_state) -> None:
        """Drop the content written after ``end`` (an append that was not committed)."""
        os.ftruncate(self._data_fd, end - self.begin)
        self.seq_end = end
        self._sha1 = sha1_state

    def make_record(self, registers: bytes, now: float) -> CommitRecord:
        """The record of the spool's state at its sequenced end."""
        if self.seq_end > self.begin and not self.first_append_time:
            self.first_append_time = now
        digest = self._sha1.digest() if self.seq_end > self.begin else EMPTY_DIGEST
        return CommitRecord(self.seq_end, self.first_append_time, self.codec, digest, registers)

    def sync(self, records: list[CommitRecord]) -> None:
        """Make ``records`` durable: sync content, then append and sync the log (syncer only)."""
        os.fdatasync(self._data_fd)
        os.write(self._log_fd, b"".join(r.encode() for r in records))
        os.fdatasync(self._log_fd)

    def close(self) -> None:
        for fd in (self._data_fd, self._log_fd):
            try:
                os.close(fd)
            except OSError:
                pass
        self._data_fd = self._log_fd = -1

    def remove_files(self) -> None:
        """Remove a persisted spool: the log first, so a crash between the two unlinks leaves a
        spool without records (dropped by :meth:`recover`), never records without their data."""
        for p in (self.log_path, self.data_path):
            try:
                os.unlink(p)
            except FileNotFoundError:
                pass

    # ---------------------------------------------------------------- what readers see

    @property
    def end(self) -> int:
        """Durable (acknowledged, visible) end offset."""
        return self.durable.end

    @property
    def content_length(self) -> int:
        return self.seq_end - self.begin

    def sum_hex(self) -> str:
        return self.durable.digest.hex()

    def __repr__(self) -> str:
        return f"Spool({self.journal!r}, [{self.begin}, {self.end}))"
