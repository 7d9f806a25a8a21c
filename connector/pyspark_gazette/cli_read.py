"""``pyspark-gazette journals read``: copying a journal to stdout, and reporting the ranges that
cannot be read (a fragment missing from or damaged in its store, a hole the brokers skip over)
on stderr, one line per range naming the journal, the offsets and the fragment.

The argument parsing and the broker connection live in :mod:`pyspark_gazette.cli`.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from pyspark_gazette.client.heads import write_head
from pyspark_gazette.errors import (
    FragmentError,
    FramingError,
    InvalidInputError,
    OffsetJumpError,
    OffsetNotYetAvailableError,
    TransportError,
)
from pyspark_gazette.fragments import FragmentRef
from pyspark_gazette.message import framing_for_content_type
from pyspark_gazette.protocol.labels import CONTENT_TYPE, label_values


def _loss(journal: str, begin: int, end: int | None, why: str, fragment: str = "") -> str:
    span = f"[{begin}, {end})" if end is not None else f"from {begin}"
    return f"data loss: journal {journal!r} offsets {span}: {why}" + (f" (fragment {fragment})" if fragment else "")


def _fragment_at(c: Any, journal: str, offset: int) -> Any:
    """The listed fragment covering ``offset``, else None."""
    for f in c.list_fragments(journal):
        if f.spec.begin <= offset < f.spec.end:
            return f.spec
    return None


def _next_fragment(c: Any, journal: str, offset: int) -> Any:
    """The first listed fragment beginning after ``offset``, else None."""
    after = [f.spec for f in c.list_fragments(journal) if f.spec.begin > offset]
    return min(after, key=lambda s: s.begin) if after else None


def exit_on_ctrl_c(out):  # type: ignore[no-untyped-def]
    """Ctrl-C ends a blocking read at once: what was copied is flushed, ``interrupted`` goes to
    stderr and the process exits 130 without unwinding. A KeyboardInterrupt raised inside gRPC's
    wait for the next response could leave the channel's cleanup (or the interpreter's exit)
    waiting forever; a reader has nothing to clean up that the broker does not see anyway (the
    stream's connection closes with the process)."""
    import signal
    import threading

    def handler(signum, frame) -> None:  # noqa: ARG001 - signal handler signature
        try:
            out.flush()
        except (BrokenPipeError, OSError):
            pass
        os.write(2, b"interrupted\n")
        os._exit(130)

    if threading.current_thread() is not threading.main_thread():
        return None  # only the main thread may set handlers (an in-process call from a thread)
    return signal.signal(signal.SIGINT, handler)


def copy_journal(args: argparse.Namespace, out, client) -> int:  # type: ignore[no-untyped-def]
    """The body of ``journals read``: copy ``args.journal`` to ``out`` through ``client``
    (which it closes), reporting unreadable ranges on stderr (see ``cmd_read``)."""
    fail = args.fail_on_data_loss == "true"
    copied = 0
    with client as c:
        start = _start_offset(c, args)
        if start is None:
            return 0  # --offset -1 without --block: the write head, where nothing is left to read
        # A start inside a message of a text framing: read from a byte before it and drop the
        # partial message through its newline (the Spark source's rule); at a message boundary the
        # byte before is that newline and nothing is dropped.
        partial = start > 0 and not args.exact_offset and _text_framing(c, args.journal)
        offset = start - 1 if partial else start
        while True:
            resume: int | None = None
            with c.retry_reader(args.journal, offset, end_offset=args.end_offset, block=args.block) as r:
                while resume is None:
                    try:
                        data = r.read()
                    except OffsetNotYetAvailableError:
                        head = r.write_head
                        if not head or r.offset >= head or (args.end_offset and r.offset >= args.end_offset):
                            return 0  # at the write head (or the end offset): done
                        # Below the write head, yet nothing to read: a hole the broker waits on.
                        nxt = _next_fragment(c, args.journal, r.offset)
                        stop = nxt.begin if nxt is not None else head
                        print(_loss(args.journal, r.offset, stop, "no fragment holds this content"), file=sys.stderr)
                        if fail or nxt is None:
                            return 1
                        resume = nxt.begin
                        continue
                    except OffsetJumpError as e:
                        if e.from_offset == args.offset == 0 and not copied:
                            print(f"note: journal {args.journal!r} begins at offset {e.to_offset}", file=sys.stderr)
                            continue  # the start of the journal was pruned: nothing lost in between
                        print(_loss(args.journal, e.from_offset, e.to_offset, "skipped by the broker"), file=sys.stderr)
                        if fail:
                            return 1
                        continue
                    except (FragmentError, TransportError) as e:
                        if isinstance(e, TransportError) and e.code != "DATA_LOSS":
                            raise
                        at = r.offset
                        spec = _fragment_at(c, args.journal, at)
                        end = spec.end if spec is not None else None
                        name = FragmentRef.from_proto(spec).content_path if spec is not None else ""
                        detail = str(e).splitlines()[0]
                        print(_loss(args.journal, at, end, f"unreadable: {detail}", name), file=sys.stderr)
                        if fail or end is None:
                            return 1
                        resume = end
                        continue
                    if not data:
                        return 0
                    if partial:
                        newline = data.find(b"\n")
                        if newline < 0:
                            continue
                        if newline:
                            print(
                                f"note: offset {start} is inside a message of {args.journal!r}; reading from the next "
                                f"message, at offset {r.offset - len(data) + newline + 1} (--exact-offset reads from "
                                f"{start} as given)",
                                file=sys.stderr,
                            )
                        partial, data = False, data[newline + 1 :]
                        if not data:
                            continue
                    out.write(data)
                    out.flush()
                    copied += len(data)
            offset = resume
            if args.end_offset and offset >= args.end_offset:
                return 0


def _start_offset(c: Any, args: argparse.Namespace) -> int | None:
    """Where ``journals read`` starts, by the Spark source's rules: ``-1`` is the write head (None
    when not blocking: nothing to read there), and an offset beyond the write head is refused."""
    if args.offset < -1:
        raise InvalidInputError(f"--offset {args.offset}: expected an offset >= 0, or -1 for the write head")
    if args.offset == -1 and args.block:
        return -1  # the broker starts a blocking read at its write head
    head = write_head(c.conns, args.journal)  # JOURNAL_NOT_FOUND is raised here
    if args.offset == -1:
        return None
    if args.offset > head:
        raise InvalidInputError(
            f"--offset {args.offset} of journal {args.journal!r} is beyond its write head {head} "
            "(-1 reads from the write head)"
        )
    return int(args.offset)


def _text_framing(c: Any, journal: str) -> bool:
    """Whether ``journal``'s content type frames messages by newlines (a line-based framing, as
    the Spark source skips to the next message in; a journal without a known framing is copied
    byte for byte)."""
    types = label_values(c.get_journal(journal).spec.labels, CONTENT_TYPE)
    try:
        return bool(types) and framing_for_content_type(types[0]).line_based
    except FramingError:
        return False
