"""Base classes of message framings: :class:`Framing` and its incremental :class:`Decoder`.

A :class:`Framing` carries the facts its callers need (text or binary, how message ends are
found, the bytes it adds around a payload, where a message's UUID lives, its content-type
labels), so code outside :mod:`pyspark_gazette.message` holds a framing object and asks it,
never branching on a framing's name. Framings are registered by
:func:`pyspark_gazette.message.framing.register_framing`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from pyspark_gazette.errors import FramingError

Message = tuple[int, bytes]


def at_offset(offset: int | None) -> str:
    """`` at offset N`` for an error message, or nothing when the offset is unknown."""
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

    #: Short name: the value of the ``framing`` option.
    name: str = ""
    #: The ``content-type`` label of journals of this framing (written on journals it creates).
    content_type: str = ""
    #: Every ``content-type`` label value read as this framing (default: :attr:`content_type`).
    content_types: tuple[str, ...] = ()
    #: Payloads are text: an untyped read's ``value`` column is a string (else binary).
    text: bool = False
    #: A newline ends each message, so a reader may start inside a message and skip to the next
    #: line, and a journal's byte range may be cut anywhere (else only at message boundaries).
    line_based: bool = False
    #: Every newline ends a message (no quoting): Arrow's vectorised line splitter applies.
    newline_split: bool = False
    #: Payloads are JSON documents: typed reads, rows written as documents, and transactional
    #: writes (the UUID at a JSON pointer) need such a framing.
    json_documents: bool = False
    #: Bytes the framing adds to every payload (see :meth:`framed_size`).
    overhead: int = 0

    def framed_size(self, payload_size: int) -> int:
        """Journal bytes of one framed message whose payload is ``payload_size`` bytes."""
        return payload_size + self.overhead

    def uuid_of(self, payload: bytes, pointer: str, uuid_field: int = 0) -> Any:
        """The Gazette UUID a message carries (a UUID or its text), or None: where the UUID lives
        is the framing's fact (``pointer``: a JSON pointer; ``uuid_field``: a protobuf field)."""
        return None

    def encode_array(self, values: Any, where: Callable[[int], str]) -> Any:
        """Frame a pyarrow string/binary array without nulls: a binary array of framed messages.
        ``where(i)`` describes row ``i`` in errors. This default frames row by row with
        :meth:`encode`; framings override it with vectorised code."""
        import pyarrow as pa

        out = []
        for i, value in enumerate(values.to_pylist()):
            try:
                out.append(self.encode(value.encode() if isinstance(value, str) else value))
            except FramingError as e:
                raise FramingError(f"{where(i)}: {e}") from None
        return pa.array(out, pa.binary())

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

    def __eq__(self, other: object) -> bool:
        # Framings are values: one unpickled on an executor equals the registered one.
        return type(other) is type(self) and other.name == self.name  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash((type(self), self.name))

    def __str__(self) -> str:
        return self.name
