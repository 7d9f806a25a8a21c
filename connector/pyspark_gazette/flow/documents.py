"""The message UUID flags and document fields Flow gives meaning to (see docs/flow.md, "Documents").

Gazette's message UUIDs carry 10 flag bits. The low two are the transaction semantics every
Gazette reader knows (OUTSIDE_TXN 0x0, CONTINUE_TXN 0x1, ACK_TXN 0x2). Flow adds bit 2, CONTROL
(0x4), for application control documents: ``{"_meta": {"backfillBegin": true, ...}}`` and
``{"_meta": {"backfillComplete": true, "truncatedAt": ...}}``, always published outside
transactions (their flags are exactly 0x4), which Flow's readers route aside like ACKs. A
sequencer that switches on the low two bits sees them as OUTSIDE_TXN (committed at once).

``_meta/op`` is Flow's change operation of a document: ``c`` (create), ``u`` (update) or
``d`` (delete).
"""

from __future__ import annotations

from typing import Any

#: The low two flag bits: transaction semantics.
TXN_MASK = 0x3
ACK_TXN = 0x2
#: Flow's CONTROL flag (bit 2): a control document (backfill begin / complete).
CONTROL = 0x4
#: JSON pointer of a document's change operation.
OP_POINTER = "/_meta/op"


def is_ack(flags: int) -> bool:
    """An ACK document (it commits a producer's transaction; never data)."""
    return flags & TXN_MASK == ACK_TXN


def is_control(flags: int) -> bool:
    """One of Flow's control documents (``_meta/backfillBegin`` / ``backfillComplete``)."""
    return bool(flags & CONTROL)


def meta_op(doc: Any) -> str | None:
    """``_meta/op`` of a parsed document, or None."""
    meta = doc.get("_meta") if isinstance(doc, dict) else None
    op = meta.get("op") if isinstance(meta, dict) else None
    return op if isinstance(op, str) else None


__all__ = ["ACK_TXN", "CONTROL", "OP_POINTER", "TXN_MASK", "is_ack", "is_control", "meta_op"]
