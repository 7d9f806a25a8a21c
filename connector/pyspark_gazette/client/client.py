"""``JournalClient``: one object for every journal operation against a Gazette cluster."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import IO, Any

from pyspark_gazette.client import journals
from pyspark_gazette.client.append_service import AppendService
from pyspark_gazette.client.appender import Appender, append
from pyspark_gazette.client.conn import ClientConfig, Connections
from pyspark_gazette.client.reader import Reader, RetryReader
from pyspark_gazette.protocol import pb


class JournalClient:
    """A client of one Gazette cluster (see :class:`ClientConfig` for the address forms).

    >>> with JournalClient("http://127.0.0.1:8080") as c:  # doctest: +SKIP
    ...     c.append("examples/foo", b'{"Msg": "Hello, Gazette!"}\\n')
    """

    def __init__(self, config: ClientConfig | str, *, auth_token: str | None = None, **kwargs: Any):
        if isinstance(config, str):
            config = ClientConfig(config, auth_token=auth_token, **kwargs)
        self.config = config
        self.conns = Connections(config)
        self._service: AppendService | None = None

    def __repr__(self) -> str:
        return f"JournalClient({self.config.address!r})"

    def __enter__(self) -> JournalClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._service is not None:
            self._service.close()
        self.conns.close()

    # listing and specs
    def list_journals(self, selector: str | pb.LabelSelector | None = None) -> list[journals.JournalInfo]:
        return journals.list_journals(self.conns, selector)

    def watch_journals(self, selector: str | pb.LabelSelector | None = None) -> Iterator[list[journals.JournalInfo]]:
        return journals.watch_journals(self.conns, selector)

    def get_journal(self, journal: str) -> journals.JournalInfo:
        return journals.get_journal(self.conns, journal)

    def apply(self, changes: Sequence[journals.Change | pb.ApplyRequest.Change]) -> int:
        return journals.apply(self.conns, changes)

    def apply_in_batches(
        self, changes: Sequence[journals.Change], size: int = journals.MAX_CHANGES_PER_APPLY
    ) -> list[int]:
        return journals.apply_in_batches(self.conns, changes, size)

    def list_fragments(self, journal: str, **kwargs: Any) -> list[journals.ListedFragment]:
        return journals.list_fragments(self.conns, journal, **kwargs)

    # reading
    def reader(self, journal: str, offset: int = 0, **kwargs: Any) -> Reader:
        return Reader(self.conns, journal, offset, **kwargs)

    def retry_reader(self, journal: str, offset: int = 0, **kwargs: Any) -> RetryReader:
        return RetryReader(self.conns, journal, offset, **kwargs)

    def read_all(self, journal: str, offset: int = 0, end_offset: int = 0, **kwargs: Any) -> bytes:
        """Read ``[offset, end_offset)`` (to the write head when ``end_offset`` is 0) into memory."""
        from pyspark_gazette.errors import OffsetNotYetAvailableError

        out = bytearray()
        with RetryReader(self.conns, journal, offset, end_offset=end_offset, block=bool(end_offset), **kwargs) as r:
            while True:
                try:
                    data = r.read()
                except OffsetNotYetAvailableError:
                    break
                if not data:
                    break
                out += data
        return bytes(out)

    # appending
    def appender(self, journal: str, **params: Any) -> Appender:
        return Appender(self.conns, journal, **params)

    def append(self, journal: str, content: bytes | IO[bytes], **params: Any) -> pb.Fragment:
        return append(self.conns, journal, content, **params)

    @property
    def append_service(self) -> AppendService:
        if self._service is None:
            self._service = AppendService(self.conns)
        return self._service
