"""Errors raised by pyspark-gazette.

Everything we raise derives from :class:`GazetteError`. Broker statuses map one to one onto
subclasses of :class:`StatusError` (look them up with :func:`error_for_status`); transport
failures of gRPC are translated into :class:`TransportError` at the client boundary, and
storage failures into :class:`FragmentError` subclasses, always ``raise ... from`` the cause;
content a read planned but no fragment holds is :class:`DataLossError`.

``retriable`` says whether the condition is expected to pass by itself (routing churn, a
broker restarting, content not yet written). Each retrying component documents which errors it
actually retries; ``retriable`` is the default they start from.

Messages never include secrets: tokens, keys and URL signatures are redacted before they get
here (see :func:`redact_url`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, ClassVar


class GazetteError(Exception):
    """Base class of every error pyspark-gazette raises."""

    retriable: ClassVar[bool] = False


# --------------------------------------------------------------------------------------------
# Broker statuses (protocol.Status).


class StatusError(GazetteError):
    """A broker answered with a non-OK ``protocol.Status``."""

    status: ClassVar[int] = -1
    status_name: ClassVar[str] = "UNKNOWN"

    def __init__(self, message: str = "", *, journal: str | None = None, response: Any = None):
        self.journal = journal
        self.response = response
        text = self.status_name
        if journal:
            text += f" (journal {journal!r})"
        if message:
            text += f": {message}"
        super().__init__(text)


class JournalNotFoundError(StatusError):
    status, status_name = 1, "JOURNAL_NOT_FOUND"


class NoJournalPrimaryBrokerError(StatusError):
    status, status_name, retriable = 2, "NO_JOURNAL_PRIMARY_BROKER", True


class NotJournalPrimaryBrokerError(StatusError):
    status, status_name, retriable = 3, "NOT_JOURNAL_PRIMARY_BROKER", True


class InsufficientJournalBrokersError(StatusError):
    status, status_name, retriable = 4, "INSUFFICIENT_JOURNAL_BROKERS", True


class NotJournalBrokerError(StatusError):
    status, status_name, retriable = 5, "NOT_JOURNAL_BROKER", True


class OffsetNotYetAvailableError(StatusError):
    status, status_name, retriable = 6, "OFFSET_NOT_YET_AVAILABLE", True


class WrongRouteError(StatusError):
    status, status_name, retriable = 7, "WRONG_ROUTE", True


class ProposalMismatchError(StatusError):
    status, status_name = 8, "PROPOSAL_MISMATCH"


class EtcdTransactionFailedError(StatusError):
    status, status_name = 9, "ETCD_TRANSACTION_FAILED"


class NotAllowedError(StatusError):
    status, status_name = 10, "NOT_ALLOWED"


class JournalReadOnlyError(GazetteError):
    """A write planned to a journal whose spec's flags forbid appends (``O_RDONLY``): raised
    before anything is appended, where the broker would answer NOT_ALLOWED to each Append."""

    def __init__(self, journal: str, flags: int):
        self.journal = journal
        self.flags = flags
        super().__init__(
            f"journal {journal!r} is read-only (its spec's flags are O_RDONLY), so nothing can be appended to it: "
            f"set its flags to O_RDWR (`gazctl journals edit -l name={journal}`, or `pyspark-gazette journals "
            f"apply` of its spec with `flags: O_RDWR`) or write to another journal"
        )


class WrongAppendOffsetError(StatusError):
    status, status_name = 11, "WRONG_APPEND_OFFSET"


class IndexHasGreaterOffsetError(StatusError):
    status, status_name = 12, "INDEX_HAS_GREATER_OFFSET"


class RegisterMismatchError(StatusError):
    """``check_registers`` did not match; ``registers`` holds the journal's current registers."""

    status, status_name = 13, "REGISTER_MISMATCH"

    def __init__(self, message: str = "", *, journal: str | None = None, response: Any = None, registers: Any = None):
        super().__init__(message, journal=journal, response=response)
        self.registers = registers


class SuspendedError(StatusError):
    status, status_name = 14, "SUSPENDED"


class FragmentStoreUnhealthyError(StatusError):
    """The journal's primary fragment store is unhealthy; ``store_health_error`` has the text."""

    status, status_name, retriable = 15, "FRAGMENT_STORE_UNHEALTHY", True

    def __init__(
        self, message: str = "", *, journal: str | None = None, response: Any = None, store_health_error: str = ""
    ):
        super().__init__(message or store_health_error, journal=journal, response=response)
        self.store_health_error = store_health_error


STATUS_ERRORS: dict[int, type[StatusError]] = {
    cls.status: cls
    for cls in (
        JournalNotFoundError,
        NoJournalPrimaryBrokerError,
        NotJournalPrimaryBrokerError,
        InsufficientJournalBrokersError,
        NotJournalBrokerError,
        OffsetNotYetAvailableError,
        WrongRouteError,
        ProposalMismatchError,
        EtcdTransactionFailedError,
        NotAllowedError,
        WrongAppendOffsetError,
        IndexHasGreaterOffsetError,
        RegisterMismatchError,
        SuspendedError,
        FragmentStoreUnhealthyError,
    )
}


class UnknownStatusError(StatusError):
    """A status value this client does not know (a newer broker)."""

    def __init__(self, status: int, message: str = "", *, journal: str | None = None, response: Any = None):
        self.status_name = f"STATUS_{status}"  # type: ignore[misc]
        super().__init__(message, journal=journal, response=response)
        self.unknown_status = status


def error_for_status(
    status: int, message: str = "", *, journal: str | None = None, response: Any = None
) -> StatusError:
    """Build the :class:`StatusError` subclass for a non-OK ``status``."""
    cls = STATUS_ERRORS.get(status)
    if cls is None:
        return UnknownStatusError(status, message, journal=journal, response=response)
    if cls is RegisterMismatchError:
        registers = getattr(response, "registers", None) if response is not None else None
        return RegisterMismatchError(message, journal=journal, response=response, registers=registers)
    if cls is FragmentStoreUnhealthyError:
        text = getattr(response, "store_health_error", "") if response is not None else ""
        return FragmentStoreUnhealthyError(message, journal=journal, response=response, store_health_error=text)
    return cls(message, journal=journal, response=response)


# --------------------------------------------------------------------------------------------
# Transport and protocol conformance.


class TransportError(GazetteError):
    """A gRPC call failed below the Gazette protocol (connection, deadline, server error).

    ``code`` is the ``grpc.StatusCode`` name (e.g. ``"UNAVAILABLE"``) and ``details`` the
    server's text, which for Apply carries spec validation errors.
    """

    RETRIABLE_CODES: ClassVar[frozenset[str]] = frozenset(
        {"UNAVAILABLE", "RESOURCE_EXHAUSTED", "ABORTED", "INTERNAL", "UNKNOWN"}
    )

    def __init__(self, what: str, code: str, details: str = ""):
        self.what = what
        self.code = code
        self.details = details
        super().__init__(f"{what}: gRPC {code}" + (f": {details}" if details else ""))

    @property
    def retriable(self) -> bool:  # type: ignore[override]
        return self.code in self.RETRIABLE_CODES


class BrokerTimeoutError(TransportError):
    """No broker answered a read or an append for longer than its ``broker.timeout`` budget:
    retries since the last progress gave up (the cluster is down, or no broker serves the
    journal). Not retried."""

    @property
    def retriable(self) -> bool:  # type: ignore[override]
        return False


class BrokerUnreachableError(BrokerTimeoutError):
    """Nothing ever answered at the configured broker address: every attempt failed to connect
    (nothing listens there, a wrong host or port, the broker not started). ``option`` names
    where the address came from (the Spark option ``broker.address``, or the CLI's flag or
    variable) and ``timeout_option`` the matching timeout; ``address`` is redacted of secrets;
    ``reason`` is gRPC's last error, shortened. Not retried."""

    def __init__(
        self,
        what: str,
        address: str,
        reason: str,
        *,
        attempts: int,
        seconds: float,
        option: str = "broker.address",
        timeout_option: str = "broker.timeout",
        budget: float | None = None,
    ):
        self.address, self.reason, self.attempts, self.seconds = redact_url(address), reason, attempts, seconds
        self.option, self.timeout_option, self.budget = option, timeout_option, budget
        note = (
            f"{timeout_option}, {budget:g}s, cut the wait short"
            if budget is not None
            else f"{timeout_option} applies once a broker has answered"
        )
        details = (
            f"nothing answered at {option} {self.address!r} ({what}: {reason}; {attempts} attempt(s) over "
            f"{seconds:.0f}s): check that a broker is running there and that the host and port are right ({note})"
        )
        super().__init__(what, "UNAVAILABLE", details)

    def __str__(self) -> str:
        return self.details

    def for_option(self, option: str, timeout_option: str) -> BrokerUnreachableError:
        """The same error naming other options (e.g. the CLI's ``--broker.address``)."""
        err = BrokerUnreachableError(
            self.what,
            self.address,
            self.reason,
            attempts=self.attempts,
            seconds=self.seconds,
            option=option,
            timeout_option=timeout_option,
            budget=self.budget,
        )
        err.__cause__ = self.__cause__
        return err

    def __reduce__(self) -> Any:
        fields = (self.attempts, self.seconds, self.option, self.timeout_option, self.budget)
        return _unreachable, (self.what, self.address, self.reason, *fields)


def _unreachable(*args: Any) -> BrokerUnreachableError:
    what, address, reason, attempts, seconds, option, timeout_option, budget = args
    return BrokerUnreachableError(
        what,
        address,
        reason,
        attempts=attempts,
        seconds=seconds,
        option=option,
        timeout_option=timeout_option,
        budget=budget,
    )


class CancelledError(TransportError):
    """The call was cancelled or ran past its deadline (never retried)."""

    @property
    def retriable(self) -> bool:  # type: ignore[override]
        return False


class ProtocolError(GazetteError):
    """A broker sent a response that breaks the protocol's rules."""


class OffsetJumpError(GazetteError):
    """A read skipped forward over content that is no longer (or not yet) available.

    Raised by readers when the broker's response offset is beyond the requested one: the start
    of the journal was pruned, ``begin_mod_time`` skipped old fragments, or a persisted hole
    was jumped. The reader stays valid and continues from ``to_offset`` on the next read, as
    Gazette's Go client does with ``ErrOffsetJump``.
    """

    def __init__(self, journal: str, from_offset: int, to_offset: int):
        self.journal, self.from_offset, self.to_offset = journal, from_offset, to_offset
        super().__init__(
            f"journal {journal!r}: offset jumped from {from_offset} to {to_offset} "
            f"({to_offset - from_offset} bytes are not available)"
        )


class AuthError(GazetteError):
    """A token is missing, malformed, expired or does not grant the capability."""


class AuthRefusedError(TransportError, AuthError):
    """A broker refused a call's bearer token: gRPC ``UNAUTHENTICATED`` (no token, or a bad,
    expired or not-yet-valid one) or ``PERMISSION_DENIED`` (the token lacks the RPC's capability,
    or, for Apply, does not cover the journal). Never retried; the token is never quoted."""


class FlowAuthorizationError(AuthError):
    """Estuary's control plane did not authorize a hosted collection (``flow.*`` options): the
    message names the collection and the answer (HTTP status and body); tokens are never quoted."""


# --------------------------------------------------------------------------------------------
# Input validation.


class InvalidInputError(GazetteError, ValueError):
    """Base class of validation errors on user input."""


class SelectorError(InvalidInputError):
    """A label selector string does not parse."""


class LabelError(InvalidInputError):
    """A label or label set breaks Gazette's label rules."""


class SpecError(InvalidInputError):
    """A journal spec is invalid."""


class SpecRefusedError(SpecError):
    """A broker refused an Apply's change as invalid (Gazette's ``JournalSpec.Validate`` on the
    broker, or the embedded broker's own rules): ``journal`` names the change's journal (empty
    when the broker's text does not tell which), ``details`` is the broker's reason."""

    def __init__(self, journal: str, details: str, *, delete: bool = False, changes: int = 1):
        self.journal, self.details = journal, details
        if journal:
            what = f"the {'delete' if delete else 'spec'} of journal {journal!r}"
        else:
            what = f"an Apply of {changes} change(s)"
        super().__init__(f"the broker refused {what}: {details}")


class StoreURLError(InvalidInputError):
    """A fragment store URL is invalid (scheme, path or query arguments)."""


class OptionError(InvalidInputError):
    """A data source option has an invalid value; ``option`` names it."""

    def __init__(self, option: str, message: str):
        self.option, self.message = option, message
        super().__init__(f"option {option!r}: {message}")


# --------------------------------------------------------------------------------------------
# Fragments.


class FragmentError(GazetteError):
    """A fragment file could not be named, opened, decoded or verified.

    The message names the journal, the offset range and the fragment (content path) so an
    operator can find the file.
    """

    def __init__(self, message: str, *, journal: str = "", begin: int = -1, end: int = -1, fragment: str = ""):
        self.journal, self.begin, self.end, self.fragment = journal, begin, end, fragment
        where = []
        if journal:
            where.append(f"journal {journal!r}")
        if begin >= 0 and end >= 0:
            where.append(f"offsets [{begin}, {end})")
        if fragment:
            where.append(f"fragment {redact_url(fragment)!r}")
        super().__init__(message + (f" ({', '.join(where)})" if where else ""))


class FragmentNameError(FragmentError, InvalidInputError):
    """A content name does not parse as ``<begin>-<end>-<sha1><ext>``."""


class FragmentNotFoundError(FragmentError):
    """The fragment file is missing from its store (deleted, pruned, or wrong credentials)."""


class FragmentDecodeError(FragmentError):
    """The fragment's bytes do not decode with its codec (corrupt file)."""


class FragmentTooShortError(FragmentError):
    """The decompressed fragment ended before ``Fragment.end``."""


class FragmentTooLongError(FragmentError):
    """The decompressed fragment continued past ``Fragment.end``."""


class FragmentChecksumError(FragmentError):
    """The SHA1 of the decompressed content does not match the fragment's sum."""


def offset_ranges(spans: Sequence[tuple[int, int]]) -> str:
    """``[(0, 10), (20, 30)]`` as ``[0, 10), [20, 30)``: how messages write offset ranges."""
    return ", ".join(f"[{b}, {e})" for b, e in spans)


class DataLossError(GazetteError):
    """Content in a planned range is in no fragment: pruned, deleted from its store, or a hole of
    the journal's listing that no broker filled. The message names the journal and the offsets;
    ``failOnDataLoss=false`` skips the range instead."""

    def __init__(self, message: str, *, journal: str = "", begin: int = -1, end: int = -1):
        self.journal, self.begin, self.end = journal, begin, end
        super().__init__(message)


class HoleInFlightError(GazetteError):
    """Offsets of a planned range that no fragment covers yet and that cannot be judged lost: the
    fragment after them was persisted less than ``holeAgeThreshold`` ago (a fragment upload may
    still be in flight after a broker hand-off), or a route member or the store did not answer.
    Raised by a batch read once it has waited ``broker.timeout`` for them; not data loss
    (``failOnDataLoss`` does not apply). The message names the journal, the offsets, the wait
    and what to do."""

    retriable = True

    def __init__(self, message: str, *, journal: str = "", holes: Sequence[tuple[int, int]] = (), waited: float = 0.0):
        self.journal, self.holes, self.waited = journal, tuple(holes), waited
        super().__init__(message)


class StoreError(GazetteError):
    """A fragment store operation failed (listing, upload, signing)."""

    retriable = True


# --------------------------------------------------------------------------------------------
# Messages.


class FramingError(GazetteError):
    """Base class of message framing errors."""


class UnexpectedEOFError(FramingError):
    """Content ended inside a message."""


class DesyncError(FramingError):
    """Fixed framing lost sync: ``skipped`` holds the discarded bytes."""

    def __init__(self, message: str, skipped: bytes = b""):
        super().__init__(message)
        self.skipped = skipped


class MessageDecodeError(FramingError):
    """A framed message does not decode (bad JSON, bad CSV row)."""


class UUIDError(InvalidInputError):
    """A message UUID is malformed or not a version-1 RFC 4122 UUID."""


class SequencerError(GazetteError):
    """The read-committed sequencer was driven incorrectly."""


# --------------------------------------------------------------------------------------------

_SIGNATURE_PARAMS = re.compile(
    r"(?i)((?:X-Amz-(?:Signature|Credential|Security-Token))|Signature|sig|se|sp|sv|sr|skoid|sktid|skt|ske|sks|skv|GoogleAccessId|Expires|token|access_token|key)=([^&#\s]*)"
)


def redact_url(text: str) -> str:
    """Replace signature-bearing query values (S3, GCS, Azure SAS) and userinfo with ``REDACTED``."""
    text = re.sub(r"(?<=://)[^/@\s]+:[^/@\s]*@", "REDACTED@", text)
    return _SIGNATURE_PARAMS.sub(lambda m: f"{m.group(1)}=REDACTED", text)
