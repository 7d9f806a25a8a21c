"""Reading journals: one Read RPC (:class:`Reader`) and the retrying :class:`RetryReader`.

A Read stream is groups of ``[metadata, chunk, chunk, ...]`` (facts sheet 3.1). The reader
checks the protocol's rules on every response, follows the write head and the covering fragment
of the last metadata (``reader.write_head``, ``reader.fragment``), and updates the route cache
from headers.

Direct reads: when the request has ``do_not_proxy`` and the broker answers a persisted fragment
with its ``fragment_url`` and then closes the stream, the reader opens the URL itself
(https presigned URLs, or ``file://`` mapped under ``ClientConfig.file_root``), decompresses it
and verifies the exact length, as Gazette's ``OpenFragmentURL`` does. A ``file://`` URL without
a configured file root cannot be opened here, so the reader restarts the RPC once without
``do_not_proxy`` and lets the broker stream the content.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import grpc

from pyspark_gazette.client.conn import Connections, backoff, translate_rpc_error
from pyspark_gazette.errors import (
    AuthError,
    BrokerTimeoutError,
    CancelledError,
    FragmentError,
    GazetteError,
    InsufficientJournalBrokersError,
    JournalNotFoundError,
    NotJournalBrokerError,
    OffsetJumpError,
    OffsetNotYetAvailableError,
    ProtocolError,
    StatusError,
    StoreError,
    SuspendedError,
    TransportError,
    error_for_status,
)
from pyspark_gazette.fragments import FragmentReader, FragmentRef, open_fragment_url
from pyspark_gazette.protocol import pb

log = logging.getLogger(__name__)


class Reader:
    """One Read RPC of ``journal`` from ``offset`` (``-1`` = the write head).

    :meth:`read` returns the next piece of content, ``b""`` once the stream has ended (see
    :attr:`eof`), and raises :class:`OffsetJumpError` (after which the reader stays valid) or
    the error of a non-OK status. Call :meth:`close` to cancel the RPC early.
    """

    def __init__(
        self,
        conns: Connections,
        journal: str,
        offset: int = 0,
        *,
        end_offset: int = 0,
        block: bool = False,
        do_not_proxy: bool | None = None,
        metadata_only: bool = False,
        begin_mod_time: int = 0,
        verify_sha1: bool = False,
        endpoint: str | None = None,
    ):
        if end_offset and end_offset < offset:
            raise ValueError(f"end_offset {end_offset} is before offset {offset} of journal {journal!r}")
        self._conns = conns
        if do_not_proxy is None:
            do_not_proxy = conns.config.direct_reads
        self.request = conns.read_request(
            journal,
            offset=offset,
            end_offset=end_offset,
            block=block,
            do_not_proxy=do_not_proxy,
            metadata_only=metadata_only,
            begin_mod_time=begin_mod_time,
        )
        self.verify_sha1 = verify_sha1
        self._endpoint = endpoint
        #: The broker asked (``endpoint`` if given, else a route member or the bootstrap address).
        self.endpoint = ""
        #: Next journal offset to be returned by :meth:`read`.
        self.offset = offset
        #: Write head and covering fragment of the last metadata response.
        self.write_head = 0
        self.fragment: pb.Fragment | None = None
        self.fragment_url = ""
        self.response: pb.ReadResponse | None = None
        self.eof = False
        #: Bytes read directly from fragment stores (not through the broker).
        self.direct_bytes = 0
        self._stream: Any = None
        self._direct: Any = None
        self._pending_url = False

    @property
    def journal(self) -> str:
        return self.request.journal

    def __enter__(self) -> Reader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        if self._stream is not None:
            self._stream.cancel()
            self._stream = None
        if self._direct is not None:
            self._direct.close()
            self._direct = None

    # ------------------------------------------------------------------------------------------

    def _start(self) -> None:
        self.endpoint = self._endpoint or self._conns.read_endpoint(self.journal)
        stub = self._conns.stub(self.endpoint)
        kwargs = {k: v for k, v in self._conns.call_kwargs().items() if k != "timeout"}
        self._stream = stub.Read(self.request, **kwargs)

    def read(self, max_bytes: int = -1) -> bytes:
        """The next piece of content; ``b""`` at the end of the stream.

        ``max_bytes`` bounds pieces of direct fragment reads (broker chunks are at most
        32,736 bytes already).
        """
        if self.eof:
            return b""
        if self._stream is None and self._direct is None:
            if self.request.end_offset and self.offset >= self.request.end_offset:
                # Nothing left to ask for; a blocking RPC at the write head would never answer
                # (a retry after the broker dropped a stream right after its last chunk).
                self.eof = True
                return b""
            self._start()
        while True:
            if self._direct is not None:
                data = self._read_direct(max_bytes)
                if data:
                    return data
                continue
            try:
                resp = next(self._stream)
            except StopIteration:
                self._stream = None
                if self._pending_url:
                    self._open_direct()
                    continue
                self.eof = True
                return b""
            except grpc.RpcError as e:
                self._stream = None
                raise translate_rpc_error(e, f"Read of {self.journal!r}") from e
            chunk = self._on_response(resp)
            if chunk is not None:
                return chunk

    def _on_response(self, resp: pb.ReadResponse) -> bytes | None:
        if resp.HasField("header"):
            self._conns.update_route(self.journal, resp.header)
        if resp.content:
            if (
                resp.status != pb.OK
                or resp.HasField("header")
                or resp.write_head
                or resp.HasField("fragment")
                or resp.fragment_url
            ):
                raise ProtocolError(f"Read of {self.journal!r}: content chunk carries metadata fields")
            if resp.offset != self.offset:
                raise ProtocolError(f"Read of {self.journal!r}: chunk at offset {resp.offset}, expected {self.offset}")
            if self._pending_url:
                # The broker proxied the content after all.
                self._pending_url = False
            self.offset += len(resp.content)
            if self.request.end_offset and self.offset > self.request.end_offset:
                raise ProtocolError(f"Read of {self.journal!r}: content past end_offset {self.request.end_offset}")
            return resp.content
        # Metadata (or a status).
        self.response = resp
        if resp.status != pb.OK:
            err = error_for_status(resp.status, f"Read at offset {self.offset}", journal=self.journal, response=resp)
            if resp.write_head:
                self.write_head = resp.write_head
            raise err
        frag = resp.fragment if resp.HasField("fragment") else None
        if frag is None:
            if resp.offset != 0 and not self.request.metadata_only:
                raise ProtocolError(f"Read of {self.journal!r}: OK metadata without a fragment at offset {resp.offset}")
        elif not (frag.begin <= resp.offset < frag.end) and not (
            self.request.end_offset and resp.offset >= self.request.end_offset
        ):
            raise ProtocolError(
                f"Read of {self.journal!r}: metadata offset {resp.offset} outside fragment [{frag.begin}, {frag.end})"
            )
        if frag is not None and resp.write_head < frag.end:
            raise ProtocolError(
                f"Read of {self.journal!r}: write head {resp.write_head} before fragment end {frag.end}"
            )
        self.write_head = resp.write_head
        self.fragment = frag
        self.fragment_url = resp.fragment_url
        self._pending_url = bool(resp.fragment_url) and self.request.do_not_proxy and not self.request.metadata_only
        if resp.offset < self.offset and self.offset != -1:
            raise ProtocolError(
                f"Read of {self.journal!r}: response offset {resp.offset} below requested {self.offset}"
            )
        if resp.offset != self.offset:
            jumped_from = self.offset
            self.offset = resp.offset
            self.request.offset = resp.offset
            if jumped_from != -1:
                raise OffsetJumpError(self.journal, jumped_from, resp.offset)
        return None

    # -- direct fragment reads ---------------------------------------------------------------

    def _open_direct(self) -> None:
        assert self.fragment is not None
        self._pending_url = False
        ref = FragmentRef.from_proto(self.fragment)
        url = self.fragment_url
        if url.startswith("file://") and not self._conns.config.file_root:
            # No local mount of the brokers' file store: let the broker stream it instead.
            log.debug("no file_root for %s; re-reading %s through the broker", url, self.journal)
            self.request.do_not_proxy = False
            self._start()
            return
        # GZIP_OFFLOAD_DECOMPRESSION bodies may arrive transcoded or still gzipped; the codec's
        # decoder accepts both.
        raw = open_fragment_url(url, ref.codec, file_root=self._conns.config.file_root)
        self._direct = FragmentReader(raw, ref, self.offset, verify_sha1=self.verify_sha1)  # type: ignore[arg-type]
        self._direct_end = min(ref.end, self.request.end_offset) if self.request.end_offset else ref.end

    def _read_direct(self, max_bytes: int) -> bytes:
        remaining = self._direct_end - self.offset
        if remaining <= 0:
            self._finish_direct()
            return b""
        want = remaining if max_bytes <= 0 else min(remaining, max_bytes)
        data = self._direct.read(min(want, 1 << 20))
        if not data:
            self._finish_direct()
            return b""
        self.offset += len(data)
        self.direct_bytes += len(data)
        if self.offset >= self._direct_end:
            self._finish_direct()
        return data

    def _finish_direct(self) -> None:
        self._direct.close()
        self._direct = None
        if self.request.end_offset and self.offset >= self.request.end_offset:
            self.eof = True
            return
        # Continue with a new RPC from the fragment's end.
        self.request.offset = self.offset
        self._start()


class RetryReader:
    """A :class:`Reader` that survives broker restarts, route changes and stream ends.

    Retried (with :func:`~pyspark_gazette.client.conn.backoff`): gRPC transport errors,
    INSUFFICIENT_JOURNAL_BROKERS, NOT_JOURNAL_BROKER, NOT_ALLOWED, FRAGMENT_STORE_UNHEALTHY
    and any other status not listed below; JOURNAL_NOT_FOUND up to 3 attempts (Etcd propagation
    after a create); OFFSET_NOT_YET_AVAILABLE quietly while ``block`` is set. A stream the
    broker closed cleanly before ``end_offset`` is restarted at once, without backoff.

    Surfaced to the caller: end of content (``b""`` with :attr:`eof` once ``end_offset`` is
    reached), :class:`OffsetJumpError` (the reader stays valid), cancellation and deadlines,
    SUSPENDED, OFFSET_NOT_YET_AVAILABLE of a non-blocking read, and JOURNAL_NOT_FOUND after
    the third attempt. Retries of failures (not of healthy streams the broker closed) stop once
    they have gone on for the client's ``broker_timeout`` without a byte read:
    :class:`~pyspark_gazette.errors.BrokerTimeoutError`, naming the journal and offset. Direct fragment-read errors (missing, corrupt or truncated fragments) and
    auth refusals (:class:`~pyspark_gazette.errors.AuthRefusedError`: UNAUTHENTICATED,
    PERMISSION_DENIED) are surfaced too: they do not pass by themselves.
    """

    def __init__(self, conns: Connections, journal: str, offset: int = 0, **kwargs: Any):
        self._conns = conns
        self._kwargs = kwargs
        self.reader = Reader(conns, journal, offset, **kwargs)
        self.attempt = 0
        self.eof = False
        self._failing_since: float | None = None  # monotonic time of the first failure since progress

    @property
    def offset(self) -> int:
        return self.reader.offset

    @property
    def journal(self) -> str:
        return self.reader.journal

    @property
    def write_head(self) -> int:
        return self.reader.write_head

    @property
    def direct_bytes(self) -> int:
        return self.reader.direct_bytes

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> RetryReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _restart(self) -> None:
        old = self.reader
        old.close()
        kwargs = dict(self._kwargs)
        kwargs["do_not_proxy"] = old.request.do_not_proxy
        self.reader = Reader(self._conns, old.journal, old.offset, **kwargs)
        self.reader.write_head = old.write_head
        self.reader.direct_bytes = old.direct_bytes

    def read(self, max_bytes: int = -1) -> bytes:
        while True:
            try:
                data = self.reader.read(max_bytes)
            except (OffsetJumpError, CancelledError, SuspendedError):
                raise
            except OffsetNotYetAvailableError:
                # Either way a fresh reader is left behind at the same offset.
                self._restart()
                if not self.reader.request.block:
                    raise
                continue
            except JournalNotFoundError:
                if self.attempt >= 3:
                    raise
                self._wait_and_restart(log_it=True)
                continue
            except (InsufficientJournalBrokersError, NotJournalBrokerError) as e:
                self._wait_and_restart(log_it=self.attempt > 0, err=e)
                continue
            except GazetteError as e:
                if not _retried_read_error(e):
                    raise
                self._check_reachable(e)
                unavailable = isinstance(e, TransportError) and e.code == "UNAVAILABLE"
                self._conns.endpoint_failed(
                    self.journal, getattr(self.reader, "endpoint", None) if unavailable else None
                )
                self._kwargs.pop("endpoint", None)  # a failed preferred broker is not asked again
                self._wait_and_restart(log_it=True, err=e)
                continue
            if data:
                self.attempt = 0
                self._failing_since = None
                return data
            # The stream ended.
            end = self.reader.request.end_offset
            if (end and self.reader.offset >= end) or self.reader.request.metadata_only:
                self.eof = True
                return b""
            self.attempt = -1  # a healthy stream closed: retry at once
            self._wait_and_restart(log_it=False)

    def _wait_and_restart(self, *, log_it: bool, err: Exception | None = None) -> None:
        if log_it or err is not None:
            self._check_budget(err)
        delay = backoff(self.attempt)
        if log_it and err is not None:
            log.log(
                logging.WARNING if self._conns.answered else logging.DEBUG,  # a wrong address is one error
                "read of %s at offset %d failed (attempt %d), retrying in %.2fs: %s",
                self.journal,
                self.offset,
                self.attempt,
                delay,
                err,
            )
        if delay:
            time.sleep(delay)
        self.attempt += 1
        self._restart()

    def _check_reachable(self, err: Exception) -> None:
        """Give up on an address where nothing answers (:meth:`Connections.unreachable`)."""
        since = time.monotonic() if self._failing_since is None else self._failing_since
        gone = self._conns.unreachable(f"read of {self.journal!r}", err, self.attempt, since)
        if gone is not None:
            raise gone from err

    def _check_budget(self, err: Exception | None) -> None:
        budget = self._conns.config.broker_timeout
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        elif budget and now - self._failing_since > budget:
            raise BrokerTimeoutError(
                f"read of {self.journal!r} at offset {self.offset}",
                "UNAVAILABLE",
                f"no broker served it for {now - self._failing_since:.0f}s, more than broker.timeout "
                f"({budget:g}s); last error: {err or 'journal not found'}",
            ) from err


def _retried_read_error(e: GazetteError) -> bool:
    if isinstance(e, (FragmentError, ProtocolError, AuthError)):
        return False  # an auth refusal repeats until the token changes
    if isinstance(e, TransportError) and e.code == "DATA_LOSS":
        return False  # the broker found stored content corrupt or short: it stays so
    if isinstance(e, StoreError):
        return True
    return isinstance(e, (StatusError, TransportError))
