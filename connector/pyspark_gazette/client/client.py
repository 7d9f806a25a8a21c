"""``JournalClient``: one object for every journal operation against a Gazette cluster."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import IO, Any

from pyspark_gazette.client import list_apply as journals
from pyspark_gazette.client.append_service import AppendService
from pyspark_gazette.client.appender import Appender, append
from pyspark_gazette.client.conn import ClientConfig, Connections
from pyspark_gazette.client.reader import Reader, RetryReader
from pyspark_gazette.errors import FramingError, InvalidInputError, OffsetNotYetAvailableError
from pyspark_gazette.message import framing_for_content_type
from pyspark_gazette.protocol import pb
from pyspark_gazette.protocol.labels import CONTENT_TYPE, label_values


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

    def list_watch(self, selector: str | pb.LabelSelector | None = None) -> journals.JournalListWatch:
        """A :class:`~pyspark_gazette.client.list_apply.JournalListWatch` of ``selector``'s journals
        (the caller closes it)."""
        return journals.JournalListWatch(self.conns, selector)

    def get_journal(self, journal: str) -> journals.JournalInfo:
        return journals.get_journal(self.conns, journal)

    def get_journals(self, names: Sequence[str]) -> dict[str, journals.JournalInfo]:
        """Each named journal that exists, by name, from one List."""
        return journals.get_journals(self.conns, names)

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

    def append(
        self, journal: str, content: bytes | IO[bytes], *, whole_messages: bool = True, **params: Any
    ) -> pb.Fragment:
        """Append ``content`` atomically (retried as :func:`~pyspark_gazette.client.appender.append`).

        With ``whole_messages`` (the default), content that does not end with a newline, bound
        for a journal whose ``content-type`` frames one message per line (ndjson, lines, csv),
        is refused with :class:`~pyspark_gazette.errors.InvalidInputError` before anything is
        sent: its last message would be incomplete and the next append would join onto it. Only
        such content costs a List of the journal. ``whole_messages=False`` appends bytes as given
        (for a message built over several appends on purpose).
        """
        if whole_messages:
            check_message_ends(self, journal, _last_byte(content))
        return append(self.conns, journal, content, **params)

    @property
    def append_service(self) -> AppendService:
        if self._service is None:
            self._service = AppendService(self.conns)
        return self._service


def _last_byte(content: bytes | bytearray | memoryview | IO[bytes]) -> bytes:
    if isinstance(content, (bytes, bytearray, memoryview)):
        return bytes(content[-1:])
    if not content.seekable():
        return b""  # a stream cannot be checked ahead of sending
    start = content.tell()
    end = content.seek(0, 2)
    if end <= start:
        content.seek(start)
        return b""
    content.seek(end - 1)
    last = content.read(1)
    content.seek(start)
    return last


def check_message_ends(client: JournalClient, journal: str, last_byte: bytes) -> None:
    """Refuse content ending in ``last_byte`` that would leave ``journal``'s last message open
    (a newline-framed journal: the next append would glue its first message onto this one)."""
    if not last_byte or last_byte == b"\n":
        return

    types = label_values(client.get_journal(journal).spec.labels, CONTENT_TYPE)
    try:
        framing = framing_for_content_type(types[0]) if types else None
    except FramingError:
        framing = None
    if framing is not None and framing.line_based:
        raise InvalidInputError(
            f"the content for journal {journal!r} ({types[0]}, one message per line) does not end with a "
            "newline, so its last message is incomplete and the next append would join onto it; nothing was "
            "appended (end the content with a newline)"
        )
