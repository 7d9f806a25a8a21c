"""Durations as Gazette spells them: Go ``time.Duration`` text and ``google.protobuf.Duration``.

Spec documents (``gazctl``'s YAML), options (``broker.timeout``) and the CLI (``--ttl``) write
durations as Go does (``1m30s``, ``24h``); JournalSpecs carry them as protobuf Durations.
"""

from __future__ import annotations

import math
import re
from typing import Any

from pyspark_gazette.errors import SpecError

#: A hole in the middle of a journal is skipped only when the fragment after it was persisted at
#: least this long ago (seconds): a younger one may be an upload still in flight after a broker
#: hand-off (Gazette's ``offsetJumpAgeThreshold`` in broker/fragment/index.go, facts sheet
#: 3.1.6). The embedded broker's index and the ``holeAgeThreshold`` option's default.
HOLE_JUMP_AGE = 6 * 3600

_MAX_DURATION_SECONDS = (2**63 - 1) / 1e9  # Go's time.Duration is int64 nanoseconds
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_DURATION_TERM = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")


def parse_duration(text: str | int | float, *, where: str = "duration") -> float:
    """Parse a Go duration string (``"1m30s"``, ``"24h"``); a bare number means seconds."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if not math.isfinite(text) or abs(text) > _MAX_DURATION_SECONDS:
            raise SpecError(f"{where}: {text!r} is not a finite duration")
        return float(text)
    s = str(text).strip()
    if s in ("0", ""):
        return 0.0
    sign = -1.0 if s.startswith("-") else 1.0
    s = s.lstrip("+-")
    pos, total = 0, 0.0
    for m in _DURATION_TERM.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _DURATION_UNITS[m.group(2)]
        pos = m.end()
    if pos != len(s) or pos == 0:
        raise SpecError(f"{where}: {text!r} is not a duration (e.g. 30s, 1m, 1h30m)")
    if total > _MAX_DURATION_SECONDS:
        raise SpecError(f"{where}: {text!r} is longer than Go's largest duration (about 292 years)")
    return sign * total


def format_duration(seconds: float) -> str:
    """Format seconds the way Go prints a ``time.Duration`` (``90`` -> ``1m30s``)."""
    if seconds == 0:
        return "0s"
    sign, rest = ("-" if seconds < 0 else ""), abs(seconds)
    if rest < 1:
        for unit, size in (("ms", 1e-3), ("us", 1e-6), ("ns", 1e-9)):
            if rest >= size or unit == "ns":
                return f"{sign}{rest / size:g}{unit}"
    hours = int(rest // 3600)
    rest -= hours * 3600
    minutes = int(rest // 60)
    rest -= minutes * 60
    out = f"{hours}h" if hours else ""
    if hours or minutes:
        out += f"{minutes}m"
    return f"{sign}{out}{round(rest, 9):g}s"


def set_duration(msg: Any, seconds: float) -> None:
    """Set a ``google.protobuf.Duration`` to ``seconds``."""
    msg.seconds = int(seconds)
    msg.nanos = int(round((seconds - int(seconds)) * 1e9))


def duration_seconds(msg: Any) -> float:
    """A ``google.protobuf.Duration`` in seconds (an unset one, ``None``, is 0)."""
    if msg is None:
        return 0.0
    return msg.seconds + msg.nanos / 1e9
