"""JSON documents out of a journal's bytes, parsed with Python's :mod:`json` the way Spark's JSON
reader takes them: a document nested too deeply is malformed, never a ``RecursionError``.

Spark's reader (Jackson's ``StreamReadConstraints``) refuses a document nested deeper than
:data:`MAX_DEPTH` levels (objects and arrays together, the document's own object included),
even inside a field it skips. Python's decoder raises ``RecursionError`` near the interpreter's
recursion limit, which is about as deep, less the frames of its caller. Every parse of a
journal's JSON goes through :func:`loads` or :func:`raw_decode`: a document deeper than
:data:`MAX_DEPTH` raises :class:`NestingError` (a ``ValueError``, which callers already take for
a malformed document), and one within it parses whatever the depth of the caller's stack.

Only documents of more than ``2 * MAX_DEPTH`` bytes can be that deep, so shorter ones pay
nothing; longer ones are measured only when they hold that many brackets (:func:`maybe_deep`).
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np

#: The deepest nesting Spark's JSON reader accepts (Jackson's default ``maxNestingDepth``).
MAX_DEPTH = 1000

_T = TypeVar("_T")
_STRINGS = re.compile(rb'"(?:[^"\\]|\\.)*"', re.S)
_OPEN = np.zeros(256, np.int32)
_OPEN[[ord("["), ord("{")]] = 1
_OPEN[[ord("]"), ord("}")]] = -1


class NestingError(ValueError):
    """A JSON document nested deeper than :data:`MAX_DEPTH` levels."""

    def __init__(self) -> None:
        super().__init__(f"JSON nested deeper than {MAX_DEPTH} levels")


def _bytes(doc: str | bytes) -> bytes:
    return doc.encode("utf-8", "surrogatepass") if isinstance(doc, str) else bytes(doc)


def maybe_deep(doc: str | bytes, levels: int = MAX_DEPTH) -> bool:
    """Whether ``doc`` is long enough and holds enough brackets to nest past ``levels``."""
    if len(doc) <= 2 * levels:
        return False
    data = _bytes(doc)
    return data.count(b"[") + data.count(b"{") > levels


def depth(doc: str | bytes) -> int:
    """The deepest nesting of objects and arrays in ``doc`` (brackets inside strings aside)."""
    data = _STRINGS.sub(b"", _bytes(doc))
    if not data:
        return 0
    steps = _OPEN[np.frombuffer(data, np.uint8)]
    return max(int(np.cumsum(steps).max()), 0)


def too_deep(doc: str | bytes) -> bool:
    """Whether ``doc`` nests deeper than Spark's reader accepts."""
    return maybe_deep(doc) and depth(doc) > MAX_DEPTH


_room_lock = threading.Lock()
_room_users = 0
_room_base = 0


@contextlib.contextmanager
def room() -> Iterator[None]:
    """Room for a few frames a level of :data:`MAX_DEPTH` more on the stack: for recursion over
    a document Spark takes (its parse, converting its values) wherever the caller is. The limit
    is the interpreter's: threads inside at once share one raise, the last out restores it."""
    global _room_users, _room_base
    with _room_lock:
        if _room_users == 0:
            _room_base = sys.getrecursionlimit()
            sys.setrecursionlimit(_room_base + 3 * MAX_DEPTH)
        _room_users += 1
    try:
        yield
    finally:
        with _room_lock:
            _room_users -= 1
            if _room_users == 0:
                sys.setrecursionlimit(_room_base)


def _parse(parse: Callable[[], _T], doc: str | bytes) -> _T:
    try:
        return parse()
    except RecursionError:
        pass
    if depth(doc) > MAX_DEPTH:
        raise NestingError from None
    # Within Spark's limit but past what the caller's stack leaves Python's decoder.
    try:
        with room():
            return parse()
    except RecursionError:
        raise NestingError from None


def loads(doc: str | bytes) -> Any:
    """``json.loads(doc)``; :class:`NestingError` (a ``ValueError``) if it nests too deeply."""
    value = _parse(lambda: json.loads(doc), doc)
    if maybe_deep(doc) and depth(doc) > MAX_DEPTH:
        raise NestingError
    return value


def raw_decode(decoder: json.JSONDecoder, text: str) -> tuple[Any, int]:
    """``decoder.raw_decode(text)`` (the first value and where it ends; what follows is
    ignored, as Spark does); :class:`NestingError` if that value nests too deeply."""
    value, end = _parse(lambda: decoder.raw_decode(text), text)
    if end > 2 * MAX_DEPTH and too_deep(text[:end]):
        raise NestingError
    return value, end
