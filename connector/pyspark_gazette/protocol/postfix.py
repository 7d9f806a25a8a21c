"""Evaluation of ``JournalSpec.Fragment.path_postfix_template``.

Gazette evaluates the template with Go's text/template over ``{ .Spool, .JournalSpec }`` at
persist time. We support the subset journals use in practice:

* literal text;
* ``{{ .Spool.FirstAppendTime.Format "<Go layout>" }}`` with the common layout tokens
  (``2006 06 01 1 Jan January 02 2 _2 002 15 03 3 04 4 05 5 PM pm Mon Monday MST Z07:00 -0700``);
* ``{{ .Spool.Begin }}``, ``{{ .Spool.End }}``, ``{{ .Spool.Journal }}`` and ``{{ .Name }}``;
* ``{{-`` / ``-}}`` whitespace trimming.

Anything else is rejected when the spec is applied (:func:`compile_template` raises
``ValueError``), so a spec is never accepted that the persister could not evaluate.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

_ACTION = re.compile(r"\{\{(-?)(.*?)(-?)\}\}", re.S)
_FORMAT = re.compile(r'^\.Spool\.FirstAppendTime\.Format\s+"((?:[^"\\]|\\.)*)"$')
_FIELD = re.compile(r"^\.(Spool\.Begin|Spool\.End|Spool\.Journal|Name|Spool\.FirstAppendTime\.Unix)$")

# Go reference-time layout tokens, longest first so "January" wins over "Jan" and "2006" over "2".
_TOKENS: list[tuple[str, Callable[[datetime], str]]] = [
    ("January", lambda t: t.strftime("%B")),
    ("Monday", lambda t: t.strftime("%A")),
    ("Z07:00", lambda t: "Z"),
    ("-0700", lambda t: "+0000"),
    ("2006", lambda t: f"{t.year:04d}"),
    ("Jan", lambda t: t.strftime("%b")),
    ("Mon", lambda t: t.strftime("%a")),
    ("MST", lambda t: "UTC"),
    ("002", lambda t: f"{t.timetuple().tm_yday:03d}"),
    ("_2", lambda t: f"{t.day:2d}"),
    ("01", lambda t: f"{t.month:02d}"),
    ("02", lambda t: f"{t.day:02d}"),
    ("03", lambda t: f"{(t.hour % 12) or 12:02d}"),
    ("04", lambda t: f"{t.minute:02d}"),
    ("05", lambda t: f"{t.second:02d}"),
    ("06", lambda t: f"{t.year % 100:02d}"),
    ("15", lambda t: f"{t.hour:02d}"),
    ("PM", lambda t: "PM" if t.hour >= 12 else "AM"),
    ("pm", lambda t: "pm" if t.hour >= 12 else "am"),
    ("1", lambda t: str(t.month)),
    ("2", lambda t: str(t.day)),
    ("3", lambda t: str((t.hour % 12) or 12)),
    ("4", lambda t: str(t.minute)),
    ("5", lambda t: str(t.second)),
]

#: Go's zero time.Time, which Gazette uses to check a template at validation time.
GO_ZERO_TIME = datetime(1, 1, 1, tzinfo=timezone.utc)


@dataclass(frozen=True)
class SpoolValues:
    """What a template can see of the spool being persisted."""

    journal: str
    begin: int
    end: int
    first_append_time: datetime  # UTC


def _const(text: str) -> Callable[[Any], str]:
    def fn(_: Any) -> str:
        return text

    return fn


def _compile_layout(layout: str) -> Callable[[datetime], str]:
    parts: list[Callable[[datetime], str]] = []
    i = 0
    literal: list[str] = []
    while i < len(layout):
        for token, fn in _TOKENS:
            if layout.startswith(token, i):
                if literal:
                    parts.append(_const("".join(literal)))
                    literal = []
                parts.append(fn)
                i += len(token)
                break
        else:
            literal.append(layout[i])
            i += 1
    if literal:
        parts.append(_const("".join(literal)))

    def render(t: datetime) -> str:
        return "".join(p(t) for p in parts)

    return render


def _compile_action(expr: str) -> Callable[[SpoolValues], str]:
    m = _FORMAT.match(expr)
    if m:
        fmt = _compile_layout(m.group(1).encode().decode("unicode_escape"))
        return lambda s: fmt(s.first_append_time)
    m = _FIELD.match(expr)
    if m:
        field = m.group(1)
        if field == "Spool.Begin":
            return lambda s: str(s.begin)
        if field == "Spool.End":
            return lambda s: str(s.end)
        if field == "Spool.FirstAppendTime.Unix":
            return lambda s: str(int(s.first_append_time.timestamp()))
        return lambda s: s.journal
    raise ValueError(
        f"unsupported path_postfix_template action {{{{ {expr} }}}} "
        '(supported: .Spool.FirstAppendTime.Format "<layout>", .Spool.Begin, .Spool.End, .Spool.Journal, .Name)'
    )


def compile_template(template: str) -> Callable[[SpoolValues], str]:
    """Compile a path postfix template, or raise ``ValueError`` naming what is unsupported."""
    parts: list[Callable[[SpoolValues], str]] = []
    pos = 0
    for m in _ACTION.finditer(template):
        literal = template[pos : m.start()]
        if m.group(1):
            literal = literal.rstrip()
        parts.append(_const(literal))
        parts.append(_compile_action(m.group(2).strip()))
        pos = m.end()
        if m.group(3):
            while pos < len(template) and template[pos].isspace():
                pos += 1
    tail = template[pos:]
    if "{{" in tail or "}}" in tail:
        raise ValueError(f"path_postfix_template has an unterminated action: {template!r}")
    parts.append(_const(tail))

    def render(values: SpoolValues) -> str:
        return "".join(p(values) for p in parts)

    return render


def evaluate(template: str, values: SpoolValues) -> str:
    """Evaluate ``template`` for one spool; an empty template gives an empty postfix."""
    if not template:
        return ""
    return compile_template(template)(values)


def check_template(template: str, journal: str) -> None:
    """Raise ``ValueError`` unless ``template`` compiles and runs on zero values (as Gazette does)."""
    if template:
        evaluate(template, SpoolValues(journal=journal, begin=0, end=0, first_append_time=GO_ZERO_TIME))
