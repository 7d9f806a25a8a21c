"""The Read RPC: fragment metadata, then content from the local spool or from the store."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import grpc

from pyspark_gazette import testing
from pyspark_gazette.broker.authz import expired, time_left
from pyspark_gazette.broker.core import BrokerCore
from pyspark_gazette.broker.journal import Journal
from pyspark_gazette.broker.specs import check_journal_field
from pyspark_gazette.errors import FragmentError, FragmentNotFoundError, StoreError, redact_url
from pyspark_gazette.fragments import FragmentRef, open_decompressor
from pyspark_gazette.protocol import MAX_READ_CHUNK, pb
from pyspark_gazette.protocol.auth import Claims
from pyspark_gazette.protocol.journal_names import base_journal

log = logging.getLogger(__name__)

READ_URL_TTL = 60
FULL = pb.JournalSpec.Suspend.FULL


def resolve(core: BrokerCore, name: str, claims: Claims | None) -> tuple[Journal | None, pb.Status]:
    """The journal and the status to answer with; one the token does not cover is not found."""
    journal = core.journal(base_journal(name))
    if journal is None or (claims is not None and not claims.covers(journal.name, journal.spec.labels)):
        return None, pb.JOURNAL_NOT_FOUND
    if journal.spec.HasField("suspend") and journal.spec.suspend.level == FULL:
        return journal, pb.SUSPENDED
    return journal, pb.OK


def serve_read(
    core: BrokerCore, request: pb.ReadRequest, context: grpc.ServicerContext, claims: Claims | None
) -> Iterator[pb.ReadResponse]:
    """Read: fragment metadata, then content from the spool or the store, optionally blocking for more."""
    if request.offset < -1:
        context.abort(grpc.StatusCode.UNKNOWN, f"invalid offset {request.offset} (expected >= -1)")
    if request.end_offset < 0 or (request.end_offset and request.offset != -1 and request.end_offset < request.offset):
        context.abort(grpc.StatusCode.UNKNOWN, f"invalid end_offset {request.end_offset} (< offset {request.offset})")
    check_journal_field(request.journal, context)
    journal, status = resolve(core, request.journal, claims)
    if journal is not None and status == pb.OK and not journal.readable:
        status = pb.NOT_ALLOWED
    if journal is None or status != pb.OK:
        yield pb.ReadResponse(status=status, header=core.headers.header())
        return
    journal.listed.wait()

    def wake() -> None:
        with journal.cond:
            journal.cond.notify_all()

    context.add_callback(wake)
    offset = request.offset
    expires = None if claims is None else claims.exp
    header: pb.Header | None = core.headers.header()
    hold = core.hold_dir is not None
    while True:
        with journal.cond:
            if offset == -1:
                offset = journal.write_head()
            while True:
                if core.stopping or journal.closed or not context.is_active():
                    return
                result = journal.query(offset, request.begin_mod_time)
                if result is not None or not request.block:
                    break
                if expired(expires):
                    return  # waiting past the token's expiry: end cleanly, as Gazette's Read
                journal.cond.wait(time_left(expires))
            write_head = journal.write_head()
            spool = journal.spool_for(result.fragment) if result is not None else None
        if result is None:
            yield pb.ReadResponse(
                status=pb.OFFSET_NOT_YET_AVAILABLE, header=header, offset=offset, write_head=write_head
            )
            return
        frag, offset = result.fragment, result.offset
        url = ""
        if frag.is_persisted:
            try:
                url = core.stores.get(frag.backing_store).signed_url(frag, READ_URL_TTL)
            except Exception as e:
                log.warning("signing %s failed: %s", frag.describe(), redact_url(str(e)))
        yield pb.ReadResponse(
            status=pb.OK,
            header=header,
            offset=offset,
            write_head=write_head,
            fragment=frag.to_proto(),
            fragment_url=url,
        )
        header = None
        if request.metadata_only or (frag.is_persisted and request.do_not_proxy):
            return
        if request.end_offset and offset >= request.end_offset:
            return
        stop = min(frag.end, request.end_offset) if request.end_offset else frag.end
        if frag.is_persisted:
            chunks = _stream_remote(core, frag, offset, stop, context)
        else:
            chunks = _stream_local(spool, offset, stop)
        try:
            for chunk in chunks:
                yield chunk
                if hold:
                    hold = False
                    testing.hold_rpc(core, "read", journal.name)
        except FileNotFoundError:
            if frag.is_persisted:
                raise
            continue  # persisted and removed meanwhile: query again
        offset = stop
        if request.end_offset and offset >= request.end_offset:
            return


def _stream_remote(core: BrokerCore, frag: FragmentRef, offset: int, stop: int, context) -> Iterator[pb.ReadResponse]:
    store = core.stores.get(frag.backing_store)
    try:
        raw = store.open_raw(frag)
    except FragmentNotFoundError as e:  # deleted or pruned under the index: it stays gone
        context.abort(grpc.StatusCode.DATA_LOSS, redact_url(f"opening fragment {frag.describe()}: {e}"))
    except Exception as e:
        context.abort(grpc.StatusCode.UNAVAILABLE, redact_url(f"opening fragment {frag.describe()}: {e}"))
    pos = offset
    try:
        try:
            reader = open_decompressor(frag.codec, raw)
            skip = offset - frag.begin
            while skip:
                block = reader.read(min(skip, 1 << 20))
                if not block:
                    break
                skip -= len(block)
            while pos < stop and not skip:
                data = reader.read(min(MAX_READ_CHUNK, stop - pos))
                if not data:
                    break
                yield pb.ReadResponse(offset=pos, content=data)
                pos += len(data)
        except (FragmentError, EOFError) as e:
            # Corrupt stored bytes: DATA_LOSS, which readers do not retry (it never heals).
            what = f"reading fragment {frag.describe()} at offset {pos}: {type(e).__name__}: {e}"
            context.abort(grpc.StatusCode.DATA_LOSS, redact_url(what))
        except (StoreError, OSError) as e:  # the store failed: worth a retry
            what = f"reading fragment {frag.describe()} at offset {pos}: {type(e).__name__}: {e}"
            context.abort(grpc.StatusCode.UNAVAILABLE, redact_url(what))
        if pos < stop:
            context.abort(grpc.StatusCode.DATA_LOSS, f"fragment {frag.describe()} ended at {pos}, before {stop}")
    finally:
        raw.close()


def _stream_local(spool, offset: int, stop: int) -> Iterator[pb.ReadResponse]:
    """Chunks of a local spool's content file, read with pread (raises FileNotFoundError if gone)."""
    fd = os.open(spool.data_path, os.O_RDONLY)
    try:
        pos = offset
        while pos < stop:
            data = os.pread(fd, min(MAX_READ_CHUNK, stop - pos), pos - spool.begin)
            if not data:
                raise OSError(f"spool {spool.data_path} is shorter than its durable end {stop}")
            yield pb.ReadResponse(offset=pos, content=data)
            pos += len(data)
    finally:
        os.close(fd)
