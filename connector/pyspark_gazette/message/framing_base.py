"""Base classes of message framings: :class:`Framing` and its incremental :class:`Decoder`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

Message = tuple[int, bytes]


def _at(offset: int | None) -> str:
    return "" if offset is None else f" at offset {offset}"


class Decoder(ABC):
    """Incremental decoder of one framing, starting at a journal offset."""

    #: Journal offset of the first byte not yet returned in a message (the first buffered byte).
    offset: int

    @abstractmethod
    def feed(self, data: bytes) -> list[Message]:
        """Consume ``data``; return ``(offset, payload)`` of every message it completes."""

    @abstractmethod
    def finish(self) -> list[Message]:
        """End of content: return remaining messages, or raise :class:`UnexpectedEOFError`."""

    @property
    @abstractmethod
    def buffered(self) -> int:
        """Bytes held back as part of an incomplete message."""


class Framing(ABC):
    """One message framing; see the module docstring."""

    name: str = ""
    content_type: str = ""

    @abstractmethod
    def encode(self, payload: bytes) -> bytes:
        """Frame one message payload."""

    @abstractmethod
    def decoder(self, start_offset: int = 0, *, strict: bool = False) -> Decoder:
        """A new incremental decoder whose first byte sits at journal offset ``start_offset``."""

    def decode_message(self, payload: bytes, offset: int | None = None) -> Any:
        """The message of a payload; the base framing returns the bytes unchanged."""
        return payload

    def encode_all(self, payloads: list[bytes]) -> bytes:
        """Frame several payloads into one buffer (one append)."""
        return b"".join(map(self.encode, payloads))

    def decode_all(self, data: bytes, start_offset: int = 0) -> list[Message]:
        """Decode complete content in one go (raises on a torn final message)."""
        dec = self.decoder(start_offset)
        out = dec.feed(data)
        out.extend(dec.finish())
        return out

    def __repr__(self) -> str:
        return f"<Framing {self.name}>"
