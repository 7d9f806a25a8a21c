"""Journal spec rules (Gazette's ``JournalSpec.Validate``, ``ApplyRequest.Validate``), called by
every layer that makes or takes a spec: the CLI, the Spark ``createJournals`` template and the
embedded broker (which adds its store-safety name rule through ``name_rule``)."""

from __future__ import annotations

from collections.abc import Callable

from pyspark_gazette.errors import SpecError
from pyspark_gazette.protocol import pb, postfix
from pyspark_gazette.protocol.durations import duration_seconds
from pyspark_gazette.protocol.journal_names import validate_journal_name
from pyspark_gazette.protocol.labels import validate_spec_labels
from pyspark_gazette.protocol.store_urls import parse_store_url

MIN_FRAGMENT_LENGTH, MAX_FRAGMENT_LENGTH = 1024, 1 << 34
MIN_REFRESH, MAX_REFRESH = 1.0, 24 * 3600.0
MIN_FLUSH = 60.0
VALID_FLAGS = {0, 1, 2, 4}

O_RDONLY, O_WRONLY, O_RDWR = 1, 2, 4

#: A journal-name check: raises :class:`SpecError` for a name it refuses.
NameRule = Callable[[str], None]


def _validate_labels(labels: pb.LabelSet) -> None:
    try:
        validate_spec_labels(labels)
    except ValueError as e:
        raise SpecError(f"labels: {e}") from e


def _validate_store(url: str) -> None:
    if not url.endswith("/") and "?" not in url:
        raise SpecError(f"fragment store {url!r}: path must end in '/'")

    try:
        parse_store_url(url)
    except ValueError as e:
        raise SpecError(f"fragment store {url!r}: {e}") from e


def _check_replication(spec: pb.JournalSpec) -> None:
    if not 1 <= spec.replication <= 5:
        raise SpecError(f"journal {spec.name!r}: replication must be 1..5 (got {spec.replication})")


def _check_labels(spec: pb.JournalSpec) -> None:
    _validate_labels(spec.labels)


def _check_length(spec: pb.JournalSpec) -> None:
    frag = spec.fragment
    if not MIN_FRAGMENT_LENGTH <= frag.length <= MAX_FRAGMENT_LENGTH:
        raise SpecError(
            f"journal {spec.name!r}: fragment.length must be {MIN_FRAGMENT_LENGTH}..{MAX_FRAGMENT_LENGTH} (got {frag.length})"
        )


def _check_codec(spec: pb.JournalSpec) -> None:
    frag = spec.fragment
    if frag.compression_codec not in (pb.NONE, pb.GZIP, pb.ZSTANDARD, pb.SNAPPY, pb.GZIP_OFFLOAD_DECOMPRESSION):
        raise SpecError(f"journal {spec.name!r}: fragment.compression_codec must be a valid codec other than INVALID")


def _check_stores(spec: pb.JournalSpec) -> None:
    frag = spec.fragment
    for url in frag.stores:
        _validate_store(url)
    if frag.stores and frag.stores[0].startswith("file:") and frag.compression_codec == pb.GZIP_OFFLOAD_DECOMPRESSION:
        raise SpecError(f"journal {spec.name!r}: GZIP_OFFLOAD_DECOMPRESSION is not supported by file:// stores")


def _check_intervals(spec: pb.JournalSpec) -> None:
    refresh = duration_seconds(spec.fragment.refresh_interval)
    if not MIN_REFRESH <= refresh <= MAX_REFRESH:
        raise SpecError(f"journal {spec.name!r}: fragment.refresh_interval must be 1s..24h (got {refresh:g}s)")


def _check_flush(spec: pb.JournalSpec) -> None:
    flush = duration_seconds(spec.fragment.flush_interval)
    if flush != 0 and flush < MIN_FLUSH:
        raise SpecError(f"journal {spec.name!r}: fragment.flush_interval must be 0 or at least 1m (got {flush:g}s)")


def _check_postfix(spec: pb.JournalSpec) -> None:
    try:
        postfix.check_template(spec.fragment.path_postfix_template, spec.name)
    except ValueError as e:
        raise SpecError(f"journal {spec.name!r}: fragment.path_postfix_template: {e}") from e


def _check_rest(spec: pb.JournalSpec) -> None:
    if spec.flags not in VALID_FLAGS:
        raise SpecError(f"journal {spec.name!r}: flags must be one of 0, 1, 2, 4 (got {spec.flags})")


def _check_rate(spec: pb.JournalSpec) -> None:
    if spec.max_append_rate < 0:
        raise SpecError(f"journal {spec.name!r}: max_append_rate must be >= 0 (got {spec.max_append_rate})")


def _check_suspend(spec: pb.JournalSpec) -> None:
    if not spec.HasField("suspend"):
        return
    if spec.suspend.level not in (0, 1, 2):
        raise SpecError(f"journal {spec.name!r}: suspend.level {spec.suspend.level} is not valid")
    if spec.suspend.offset < 0:
        raise SpecError(f"journal {spec.name!r}: suspend.offset must be >= 0 (got {spec.suspend.offset})")


#: The checks of a spec after its name, in the order Gazette's JournalSpec.Validate makes them.
_SPEC_CHECKS = (
    _check_replication,
    _check_labels,
    _check_length,
    _check_codec,
    _check_stores,
    _check_intervals,
    _check_flush,
    _check_postfix,
    _check_rest,
    _check_rate,
    _check_suspend,
)


def spec_problems(spec: pb.JournalSpec, *, name_rule: NameRule = validate_journal_name) -> list[SpecError]:
    """Every problem of ``spec``, in order (empty when it is valid): clients show them all at once.
    ``name_rule`` checks the journal name (a broker adds its own rules to Gazette's)."""
    problems = []
    for check in (lambda spec: name_rule(spec.name), *_SPEC_CHECKS):
        try:
            check(spec)
        except SpecError as e:
            problems.append(e)
    return problems


def validate_spec(spec: pb.JournalSpec, *, name_rule: NameRule = validate_journal_name) -> None:
    """Raise :class:`SpecError` (message says what and why) unless ``spec`` is complete and valid.

    Like Gazette's broker, only the first problem is reported; :func:`spec_problems` lists all."""
    problems = spec_problems(spec, name_rule=name_rule)
    if problems:
        raise problems[0]


def validate_apply(req: pb.ApplyRequest, *, name_rule: NameRule = validate_journal_name) -> None:
    """Validate an ApplyRequest's shape and every upserted spec (raises :class:`SpecError`)."""
    if not req.changes:
        raise SpecError("expected at least one change")
    seen: set[str] = set()
    for i, change in enumerate(req.changes):
        has_upsert, has_delete = change.HasField("upsert"), bool(change.delete)
        if has_upsert == has_delete:
            raise SpecError(f"changes[{i}]: expected exactly one of upsert or delete")
        if has_upsert:
            validate_spec(change.upsert, name_rule=name_rule)
            name = change.upsert.name
            if change.expect_mod_revision < -1:
                raise SpecError(f"changes[{i}]: invalid expect_mod_revision {change.expect_mod_revision}")
        else:
            name = change.delete
            name_rule(name)
            if change.expect_mod_revision == 0 or change.expect_mod_revision < -1:
                raise SpecError(f"changes[{i}]: delete of {name!r} needs expect_mod_revision > 0 or -1")
        if name in seen:
            raise SpecError(f"changes[{i}]: journal {name!r} appears more than once")
        seen.add(name)
