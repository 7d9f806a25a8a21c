"""Parsing option values: strings from Spark, the environment or the options file, to typed values.

:func:`parse` validates one query's options against :data:`~pyspark_gazette.spark.options.table.OPTIONS`
for a scope (read, stream, write) and returns ``{canonical key: typed value}`` with defaults; the
precedence is explicit options, then ``PYSPARK_GAZETTE_<KEY>`` variables, then the options file
(:mod:`~pyspark_gazette.spark.options.conf_file`).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

from pyspark_gazette.errors import OptionError, SpecError
from pyspark_gazette.protocol.durations import parse_duration as go_duration
from pyspark_gazette.spark.options.conf_file import options_from_file
from pyspark_gazette.spark.options.kafka import kafka_hint
from pyspark_gazette.spark.options.table import BY_KEY, ENV_PREFIX, OPTIONS, READS, STREAM, WRITE, Option

#: Keys Spark itself may pass along with the user's options.
_SPARK_KEYS = {"path", "paths"}
_BYTES = re.compile(r"^\s*(\d+)\s*([kmgt]i?b?|b)?\s*$", re.I)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def _parse_bool(key: str, text: str) -> bool:
    t = text.strip().lower()
    if t in ("true", "1", "yes"):
        return True
    if t in ("false", "0", "no"):
        return False
    raise OptionError(key, f"expected true or false, got {text!r}")


def _parse_bytes(key: str, text: str) -> int:
    m = _BYTES.match(text)
    if not m:
        raise OptionError(key, f"expected a byte size such as 134217728, 128m or 1g, got {text!r}")
    value = int(m.group(1)) * _UNITS[(m.group(2) or "")[:1].lower()]
    if value <= 0:
        raise OptionError(key, f"must be positive, got {text!r}")
    return value


def _parse_int(key: str, text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise OptionError(key, f"expected an integer, got {text!r}") from None


#: Milliseconds since the epoch below this (1973-03-03) are almost surely seconds.
_PLAUSIBLE_MS = 100_000_000_000


def _parse_timestamp(key: str, text: str) -> int:
    value = _parse_int(key, text)
    if value < 0:
        raise OptionError(key, f"expected milliseconds since the epoch, got {text!r}")
    if 0 < value < _PLAUSIBLE_MS:
        raise OptionError(
            key,
            f"{value} looks like seconds since the epoch (as milliseconds it is before 1973); "
            f"give milliseconds, e.g. {value * 1000}",
        )
    return value


def parse_duration(key: str, text: str) -> float:
    try:
        value = go_duration(text, where=key)
    except SpecError:
        raise OptionError(key, f"expected a duration such as 30s, 5m or 1h, got {text!r}") from None
    if value < 0:
        raise OptionError(key, f"must not be negative, got {text!r}")
    return value


def parse_offsets(key: str, text: str) -> str | dict[str, int]:
    """``earliest`` / ``latest`` or a JSON object of journal -> offset (-2 earliest, -1 latest)."""
    t = text.strip()
    if t.lower() in ("earliest", "latest"):
        return t.lower()
    try:
        value = json.loads(t)
    except json.JSONDecodeError:
        raise OptionError(key, f"expected earliest, latest or a JSON object of journal offsets, got {text!r}") from None
    if not isinstance(value, dict) or not value:
        raise OptionError(key, f"expected a non-empty JSON object of journal offsets, got {text!r}")
    out: dict[str, int] = {}
    for journal, offset in value.items():
        if isinstance(offset, dict) and offset and all(str(k).isdigit() for k in offset):
            raise OptionError(
                key,
                f"journal {journal!r} has {json.dumps(offset)}, Kafka's offsets per partition; a journal has no "
                f"partitions: give one byte offset per journal, e.g. {json.dumps({journal: 0})}",
            )
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < -2:
            raise OptionError(key, f"offset of journal {journal!r} must be an integer >= -2, got {offset!r}")
        out[str(journal)] = offset
    return out


def closest(name: str, candidates: Iterable[str]) -> str | None:
    """The candidate most like ``name`` (case and dots ignored), if any is close enough."""
    import difflib

    norm = {c.lower().replace(".", ""): c for c in candidates}
    key = name.lower().replace(".", "")
    if key in norm:
        return norm[key]
    match = difflib.get_close_matches(key, list(norm), n=1, cutoff=0.75)
    return norm[match[0]] if match else None


def spelled_like(key: str, model: str | None) -> str:
    """``key`` (lower-cased) with the case of ``model`` where their letters match, e.g.
    ``startingoffset`` like ``startingOffsets`` is ``startingOffset``: an unknown option shown
    much as the user likely wrote it, when Spark has lower-cased it."""
    if not model:
        return key
    import difflib

    out = list(key)
    for tag, i1, i2, j1, _ in difflib.SequenceMatcher(None, key, model.lower(), autojunk=False).get_opcodes():
        if tag == "equal":
            out[i1:i2] = model[j1 : j1 + i2 - i1]
    return "".join(out)


def check_offsets_name_read_journals(
    starting: str | dict[str, int] | None, ending: str | dict[str, int] | None, read: Iterable[str]
) -> None:
    """``startingOffsets`` / ``endingOffsets`` JSON may only name journals being read (as Spark's
    Kafka source requires): an offset for another journal is a mistake that would read the wrong data."""
    names = set(read)
    for key, value in (("startingOffsets", starting), ("endingOffsets", ending)):
        if not isinstance(value, dict):
            continue
        for journal in value:
            if journal not in names:
                close = closest(journal, names)
                hint = f" (did you mean {close!r}?)" if close else ""
                shown = ", ".join(sorted(names)[:5]) + (", ..." if len(names) > 5 else "")
                raise OptionError(
                    key, f"names journal {journal!r}, which is not being read{hint}; the read covers: {shown or 'none'}"
                )


_PARSERS = {
    "bool": _parse_bool,
    "bytes": _parse_bytes,
    "int": _parse_int,
    "timestamp": _parse_timestamp,
    "duration": parse_duration,
    "offsets": parse_offsets,
}


def env_name(key: str) -> str:
    return ENV_PREFIX + key.upper().replace(".", "_")


def _value(opt: Option, raw: str) -> Any:
    """``raw`` converted to ``opt``'s type (an :class:`OptionError` naming it when it does not fit)."""
    if opt.kind == "enum":
        match = [c for c in opt.choices if c.lower() == raw.strip().lower()]
        if not match:
            raise OptionError(opt.key, f"expected one of {', '.join(opt.choices)}, got {raw!r}")
        return match[0]
    if opt.kind in _PARSERS:
        return _PARSERS[opt.kind](opt.key, raw)
    if not raw.strip():
        raise OptionError(opt.key, "must not be empty")
    return raw.strip()


def _default(opt: Option) -> Any:
    """``opt``'s default as a parsed value: a default written as text (``"15m"``, ``"latest"``)
    goes through the option's own parser, exactly as the same text given by a user would."""
    if isinstance(opt.default, str) and (opt.kind in _PARSERS or opt.kind == "enum"):
        return _value(opt, opt.default)
    return opt.default


#: Every option's parsed default, computed once (a default its parser refuses fails the import).
DEFAULTS: dict[str, Any] = {o.key: _default(o) for o in OPTIONS}

#: Each option's canonical spelling by its lower-cased key (for the options file's messages).
_SPELLINGS = {k: o.key for k, o in BY_KEY.items()}


def parse(options: Mapping[str, str], scope: str, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Validate ``options`` for ``scope`` and return ``{canonical key: typed value}`` for every option
    of the scope, a missing one at its parsed default (:data:`DEFAULTS`).

    Raises :class:`OptionError` for unknown keys (a key of Spark's Kafka source names what to use
    instead, :mod:`~pyspark_gazette.spark.options.kafka`), keys of another scope, and bad values.
    """
    env = os.environ if env is None else env
    given = {str(k).lower(): v for k, v in options.items() if v is not None}
    written = {str(k).lower(): str(k) for k in options}
    in_file = options_from_file(env, _SPELLINGS)
    out: dict[str, Any] = {}
    for key in given:
        if key in _SPARK_KEYS:
            continue
        opt = BY_KEY.get(key)
        if opt is None:
            kafka = kafka_hint(written[key])
            if kafka is not None:
                name, instead = kafka
                what = "a Kafka client property" if key.startswith("kafka.") else "an option of Spark's Kafka source"
                raise OptionError(written[key] if written[key] != key else name, f"is {what}; {instead}")
            close = closest(key, [o.key for o in OPTIONS])
            hint = f" (did you mean {close!r}?)" if close else ""
            # Spark lower-cases option keys before a data source sees them: a key without capitals
            # is shown with the case of the suggestion.
            shown = written[key] if written[key] != key else spelled_like(key, close)
            raise OptionError(shown, f"unknown option{hint}; see the options reference")
        if scope not in opt.scopes:
            hint = (
                "; a stream has no end: use trigger(availableNow=True) to stop at the data present at start"
                if scope == STREAM and opt.key == "endingOffsets"
                else ""
            )
            raise OptionError(
                opt.key, f"does not apply to {scope}s (it applies to: {', '.join(sorted(opt.scopes))}){hint}"
            )
    for opt in OPTIONS:
        if scope not in opt.scopes:
            continue
        raw = given.get(opt.key.lower())
        if raw is None:
            for name in (env_name(opt.key), *opt.env):
                if env.get(name):
                    raw = env[name]
                    break
        from_file = None
        if raw is None and opt.key.lower() in in_file:
            from_file = in_file[opt.key.lower()]
            raw = from_file.value
        if raw is None:
            out[opt.key] = DEFAULTS[opt.key]
            continue
        try:
            out[opt.key] = _value(opt, str(raw))
        except OptionError as e:
            if from_file is None:
                raise
            raise OptionError(opt.key, f"{from_file.where}: {e.message}") from None
    if given.get("path") and scope in READS:
        if out.get("journals") or out.get("selector"):
            raise OptionError("path", "give journals either as the load() path or as the journals/selector option")
        out["journals"] = str(given["path"])
    if given.get("path") and scope == WRITE:
        if out.get("journal"):
            raise OptionError("path", "give the journal either as the save() path or as the journal option")
        out["journal"] = str(given["path"])
    return out


def redacted(options: Mapping[str, str]) -> dict[str, str]:
    """The options with secret values replaced (for logs and error messages)."""
    out = {}
    for k, v in options.items():
        opt = BY_KEY.get(str(k).lower())
        out[k] = "*****" if opt is not None and opt.kind == "secret" else v
    return out
