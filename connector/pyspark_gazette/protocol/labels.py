"""Label rules and label selectors (facts sheet sections 2.3 and 5.5).

Used on both sides of the wire: the client parses user selector strings with
:func:`parse_selector`, and the embedded broker validates specs with
:func:`validate_spec_labels` and answers List with :func:`matches`.

Rules, as Gazette enforces them:

* a label name is 2-64 characters of ASCII letters, digits and ``-_+/.``; a value is 0-1024
  characters of letters, digits and ``-_+/.=%``;
* a :class:`LabelSet` is sorted by (name, value) and unique, and an empty value may not sit
  beside non-empty values of the same name;
* ``prefix=True`` is allowed only inside a selector;
* journal specs may not carry the meta-labels ``name`` and ``prefix``, and follow the
  well-known label rules (single-value labels, ``content-type`` is a MIME type,
  ``message-type`` needs ``content-type``, ``message-subtype`` needs ``message-type``).

Selector string syntax (comma-separated terms, whitespace tolerant)::

    a=b   a==b   a!=b   a in (x,y)   a notin (x,y)   a not in (x,y)   a   !a
    name:prefix=examples/    (the ``:prefix`` suffix marks a prefix match)
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from pyspark_gazette.errors import LabelError, SelectorError
from pyspark_gazette.protocol._gen import protocol_pb2 as pb
from pyspark_gazette.protocol.journal_names import base_journal

MIN_NAME_LEN, MAX_NAME_LEN = 2, 64
MAX_VALUE_LEN = 1024

#: Meta-label carrying the journal name in List selectors.
META_NAME = "name"
#: Meta-label matching journals under a directory-like name prefix (value ends in ``/``).
META_PREFIX = "prefix"

CONTENT_TYPE = "content-type"
MESSAGE_TYPE = "app.gazette.dev/message-type"
MESSAGE_SUBTYPE = "app.gazette.dev/message-subtype"
TAG = "app.gazette.dev/tag"
MANAGED_BY = "app.gazette.dev/managed-by"
INSTANCE = "app.gazette.dev/instance"
REGION = "app.gazette.dev/region"

#: Well-known labels that may carry at most one value.
SINGLE_VALUE_LABELS = frozenset({CONTENT_TYPE, MESSAGE_TYPE, MESSAGE_SUBTYPE, MANAGED_BY, INSTANCE, REGION})

_NAME_CHARS = "A-Za-z0-9\\-_+/."
_VALUE_CHARS = _NAME_CHARS + "=%"
_NAME_RE = re.compile(f"[{_NAME_CHARS}]{{{MIN_NAME_LEN},{MAX_NAME_LEN}}}")
_VALUE_RE = re.compile(f"[{_VALUE_CHARS}]{{0,{MAX_VALUE_LEN}}}")
# RFC 1521 media type restricted to what a label value can hold (no parameters: ';' and
# spaces are not label characters). Like Go's mime.ParseMediaType, a lone type is accepted.
_MIME_TOKEN = "[A-Za-z0-9\\-_+.%]+"
_MIME_RE = re.compile(f"{_MIME_TOKEN}(?:/{_MIME_TOKEN})?")


# --------------------------------------------------------------------------------------------
# Validation.


def validate_label(name: str, value: str, *, allow_prefix: bool = False, prefix: bool = False) -> None:
    """Raise :class:`LabelError` naming the label if ``name``/``value`` break the rules.

    ``prefix`` is the label's prefix flag; it is an error unless ``allow_prefix``.
    """
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise LabelError(
            f"invalid label name {name!r}: expected {MIN_NAME_LEN}-{MAX_NAME_LEN} letters, digits or '-_+/.'"
        )
    if not isinstance(value, str) or not _VALUE_RE.fullmatch(value):
        raise LabelError(
            f"invalid value {value!r} of label {name!r}: expected 0-{MAX_VALUE_LEN} letters, digits or '-_+/.=%'"
        )
    if prefix and not allow_prefix:
        raise LabelError(f"label {name!r} (value {value!r}) is a prefix match, allowed only in a selector")


def validate_label_set(ls: pb.LabelSet, *, allow_prefix: bool = False) -> None:
    """Raise :class:`LabelError` unless ``ls`` is a well-formed LabelSet.

    Checks each label, (name, value) order and uniqueness, and that an empty value does not
    appear beside non-empty values of the same name.
    """
    prev: pb.Label | None = None
    for i, label in enumerate(ls.labels):
        validate_label(label.name, label.value, allow_prefix=allow_prefix, prefix=label.prefix)
        if prev is not None:
            if (prev.name, prev.value) >= (label.name, label.value):
                raise LabelError(
                    f"labels not in unique, sorted order at index {i}: "
                    f"{label.name}={label.value!r} after {prev.name}={prev.value!r}"
                )
            if prev.name == label.name and prev.value == "":
                raise LabelError(f"label {label.name!r} has both an empty and a non-empty value ({label.value!r})")
        prev = label


def validate_spec_labels(ls: pb.LabelSet) -> None:
    """Validate the labels of a JournalSpec: set rules, no meta-labels, well-known label rules."""
    validate_label_set(ls, allow_prefix=False)
    counts: dict[str, int] = {}
    for label in ls.labels:
        counts[label.name] = counts.get(label.name, 0) + 1
        if label.name in (META_NAME, META_PREFIX):
            raise LabelError(f"label {label.name!r} is a meta-label and may not appear in a journal spec")
    for name in sorted(SINGLE_VALUE_LABELS):
        if counts.get(name, 0) > 1:
            raise LabelError(f"label {name!r} may have only one value, has {counts[name]}")
    for label in ls.labels:
        if label.name == CONTENT_TYPE and not _MIME_RE.fullmatch(label.value):
            raise LabelError(f"label {CONTENT_TYPE!r} value {label.value!r} is not a MIME type")
    if MESSAGE_TYPE in counts and CONTENT_TYPE not in counts:
        raise LabelError(f"label {MESSAGE_TYPE!r} requires label {CONTENT_TYPE!r}")
    if MESSAGE_SUBTYPE in counts and MESSAGE_TYPE not in counts:
        raise LabelError(f"label {MESSAGE_SUBTYPE!r} requires label {MESSAGE_TYPE!r}")


def validate_selector(sel: pb.LabelSelector) -> None:
    """Raise :class:`SelectorError` unless ``sel`` is a well-formed selector.

    Both sides must be valid label sets (prefix labels allowed), and every ``prefix``
    meta-label value must end in ``/``.
    """
    for side, ls in (("include", sel.include), ("exclude", sel.exclude)):
        try:
            validate_label_set(ls, allow_prefix=True)
        except LabelError as e:
            raise SelectorError(f"selector {side}: {e}") from e
        for label in ls.labels:
            if label.name == META_PREFIX and not label.value.endswith("/"):
                raise SelectorError(f"selector {side}: meta-label 'prefix' value {label.value!r} must end in '/'")


# --------------------------------------------------------------------------------------------
# Parsing and formatting selector strings.

_SPACE_RE = re.compile(r"\s*")
_NAME_TOKEN_RE = re.compile(f"[{_NAME_CHARS}]+")
_VALUE_TOKEN_RE = re.compile(f"[{_VALUE_CHARS}]+")
_PREFIX_SUFFIX = ":prefix"
_IN_RE = re.compile(r"in\s*\(")
_NOTIN_RE = re.compile(r"not\s*in\s*\(")


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0
        self.term_start = 0

    def fail(self, what: str) -> SelectorError:
        term = self.text[self.term_start :].split(",", 1)[0].strip() or self.text[self.term_start :]
        return SelectorError(f"selector {self.text!r}: {what} at position {self.pos} (in term {term!r})")

    def skip_space(self) -> None:
        self.pos = _SPACE_RE.match(self.text, self.pos).end()  # type: ignore[union-attr]

    def token(self, regex: re.Pattern[str], what: str) -> str:
        m = regex.match(self.text, self.pos)
        if not m:
            found = repr(self.text[self.pos]) if self.pos < len(self.text) else "end of selector"
            raise self.fail(f"expected {what}, found {found}")
        self.pos = m.end()
        return m.group()

    def name(self) -> tuple[str, bool]:
        name = self.token(_NAME_TOKEN_RE, "a label name")
        if self.text.startswith(_PREFIX_SUFFIX, self.pos):
            self.pos += len(_PREFIX_SUFFIX)
            return name, True
        return name, False

    def value_list(self) -> list[str]:
        # Positioned just after '('.
        values = []
        while True:
            self.skip_space()
            values.append(self.token(_VALUE_TOKEN_RE, "a label value"))
            self.skip_space()
            if self.text.startswith(")", self.pos):
                self.pos += 1
                return values
            if not self.text.startswith(",", self.pos):
                raise self.fail("expected ',' or ')' in value list")
            self.pos += 1

    def term(self) -> tuple[bool, list[pb.Label]]:
        """Parse one term; returns (is_exclude, labels)."""
        text = self.text
        if text.startswith("!", self.pos):
            self.pos += 1
            self.skip_space()
            name, prefix = self.name()
            return True, [pb.Label(name=name, value="", prefix=prefix)]
        name, prefix = self.name()
        self.skip_space()
        if self.pos == len(text) or text.startswith(",", self.pos):
            return False, [pb.Label(name=name, value="", prefix=prefix)]
        exclude = False
        if text.startswith("!=", self.pos):
            exclude, self.pos = True, self.pos + 2
        elif text.startswith("==", self.pos):
            self.pos += 2
        elif text.startswith("=", self.pos):
            self.pos += 1
        else:
            m = _IN_RE.match(text, self.pos) or _NOTIN_RE.match(text, self.pos)
            if m is None:
                raise self.fail("expected '=', '!=', 'in (', 'notin (' or ','")
            exclude, self.pos = m.group().startswith("not"), m.end()
            return exclude, [pb.Label(name=name, value=v, prefix=prefix) for v in self.value_list()]
        self.skip_space()
        value = self.token(_VALUE_TOKEN_RE, "a label value")
        return exclude, [pb.Label(name=name, value=value, prefix=prefix)]


def parse_selector(text: str) -> pb.LabelSelector:
    """Parse Gazette's selector string syntax into a :class:`pb.LabelSelector`.

    Terms are comma-separated: ``a=b`` (or ``a==b``), ``a!=b``, ``a in (x,y)``,
    ``a notin (x,y)`` (or ``not in``), ``a`` (label present: include with empty value) and
    ``!a`` (label absent: exclude with empty value). A ``:prefix`` suffix on the name
    (``name:prefix=examples/``) marks a prefix match. An empty string selects everything.
    Both sides come back sorted and are validated; errors raise :class:`SelectorError` naming
    the offending term and its position.
    """
    if not isinstance(text, str):
        raise SelectorError(f"a selector must be a string, not {type(text).__name__}")
    p = _Parser(text)
    include: list[pb.Label] = []
    exclude: list[pb.Label] = []
    p.skip_space()
    while p.pos < len(text):
        p.term_start = p.pos
        is_exclude, labels = p.term()
        (exclude if is_exclude else include).extend(labels)
        p.skip_space()
        if p.pos == len(text):
            break
        if not text.startswith(",", p.pos):
            raise p.fail("expected ',' between terms")
        p.pos += 1  # A trailing ',' is accepted, as Gazette's parser does.
        p.skip_space()
    sel = pb.LabelSelector(
        include=pb.LabelSet(labels=_sorted(include)),
        exclude=pb.LabelSet(labels=_sorted(exclude)),
    )
    try:
        validate_selector(sel)
    except SelectorError as e:
        raise SelectorError(f"{e} (parsing {text!r})") from e
    return sel


def _sorted(labels: list[pb.Label]) -> list[pb.Label]:
    return sorted(labels, key=lambda label: (label.name, label.value, label.prefix))


def to_selector(selector: str | pb.LabelSelector | None) -> pb.LabelSelector:
    """A selector from its text form, as is, or empty (matches everything) for None."""
    if selector is None:
        return pb.LabelSelector()
    if isinstance(selector, pb.LabelSelector):
        return selector
    return parse_selector(selector)


def format_selector(sel: pb.LabelSelector) -> str:
    """The canonical string form of ``sel``; ``parse_selector(format_selector(s)) == s``.

    Values of one name (and prefix flag) are grouped into a single term: ``a=b``,
    ``a in (x,y)``, ``a!=b``, ``a notin (x,y)``, ``a`` or ``!a``.
    """
    terms = [*_format_side(sel.include.labels, exclude=False), *_format_side(sel.exclude.labels, exclude=True)]
    return ",".join(terms)


def _format_side(labels: Iterable[pb.Label], *, exclude: bool) -> list[str]:
    groups: dict[tuple[str, bool], list[str]] = {}
    for label in labels:
        groups.setdefault((label.name, label.prefix), []).append(label.value)
    out = []
    for (name, prefix), values in groups.items():
        key = name + (_PREFIX_SUFFIX if prefix else "")
        if values == [""]:
            out.append(("!" if exclude else "") + key)
        elif len(values) == 1 and not (values[0].startswith("=") and not exclude) and values[0]:
            out.append(f"{key}{'!=' if exclude else '='}{values[0]}")
        else:
            # Several values, or an include value starting with '=' ('a==b' would read as 'a=b').
            out.append(f"{key} {'notin' if exclude else 'in'} ({','.join(values)})")
    return out


# --------------------------------------------------------------------------------------------
def names_selector(journals: Iterable[str]) -> pb.LabelSelector:
    """A selector of exactly the named journals (their ``;meta`` suffixes stripped), by the
    meta-label ``name``: several values of one label in ``include`` select a journal having any."""
    names = sorted({base_journal(j) for j in journals})
    return pb.LabelSelector(include=pb.LabelSet(labels=[pb.Label(name=META_NAME, value=n) for n in names]))


# Matching.


def _hit(want: str, prefix: bool, have: Iterable[str]) -> bool:
    if want == "":
        return True  # An empty selector value matches any value of a present label.
    if prefix:
        return any(v.startswith(want) for v in have)
    return want in have


def matches(selector: pb.LabelSelector, labels: pb.LabelSet, *, journal_name: str | None = None) -> bool:
    """Whether ``labels`` (of journal ``journal_name``) is selected by ``selector``.

    * every include name must be matched by at least one of its selector values (an empty
      value matches any value; a prefix label matches values starting with it);
    * no exclude label may match (an empty value excludes the name whatever its value);
    * when ``journal_name`` is given, the meta-label ``name`` matches the journal name (as a
      prefix when ``prefix=True``) and ``prefix=<dir>/`` is a name-prefix match; spec labels
      called ``name``/``prefix`` are ignored. Without ``journal_name`` the meta-labels are
      compared with ``labels`` like any other label.

    ``selector`` is assumed valid (see :func:`validate_selector`).
    """
    have: dict[str, list[str]] = {}
    for label in labels.labels:
        have.setdefault(label.name, []).append(label.value)
    if journal_name is not None:
        have[META_NAME] = [journal_name]
        have.pop(META_PREFIX, None)

    def rewrite(label: pb.Label) -> tuple[str, str, bool]:
        if journal_name is not None and label.name == META_PREFIX:
            return META_NAME, label.value, True
        return label.name, label.value, label.prefix

    for label in selector.exclude.labels:
        name, value, prefix = rewrite(label)
        values = have.get(name)
        if values and _hit(value, prefix, values):
            return False
    wanted: dict[str, list[tuple[str, bool]]] = {}
    for label in selector.include.labels:
        name, value, prefix = rewrite(label)
        wanted.setdefault(name, []).append((value, prefix))
    for name, options in wanted.items():
        values = have.get(name)
        if not values or not any(_hit(value, prefix, values) for value, prefix in options):
            return False
    return True


def label_values(labels: pb.LabelSet, name: str) -> list[str]:
    """The values of label ``name`` in ``labels``, in order (e.g. ``label_values(spec.labels, CONTENT_TYPE)``)."""
    return [label.value for label in labels.labels if label.name == name]


__all__ = [
    "CONTENT_TYPE",
    "INSTANCE",
    "MANAGED_BY",
    "MESSAGE_SUBTYPE",
    "MESSAGE_TYPE",
    "META_NAME",
    "META_PREFIX",
    "REGION",
    "SINGLE_VALUE_LABELS",
    "TAG",
    "format_selector",
    "label_values",
    "matches",
    "parse_selector",
    "validate_label",
    "validate_label_set",
    "validate_selector",
    "validate_spec_labels",
]
