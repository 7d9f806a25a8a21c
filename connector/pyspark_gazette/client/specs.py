"""Journal specs as YAML, in the hierarchical layout of Gazette's ``gazctl journals apply``.

A document is a tree of nodes. A node whose ``name`` ends in ``/`` is a directory: its fields
(replication, labels, fragment settings, flags, max_append_rate) are defaults that every
descendant inherits unless it sets them itself; labels are merged, a child's value of a label
name replacing the parent's values of that name. Leaf nodes (names without a trailing ``/``)
are journals. A node may say ``revision: N`` (the expected mod revision; 0 = create, -1 = no
check) and ``delete: true``. Children's names must start with their parent's name::

    name: examples/
    replication: 1
    labels:
      - {name: content-type, value: application/x-ndjson}
    fragment:
      length: 134217728
      compression_codec: ZSTANDARD
      stores: [file:///examples/]
      refresh_interval: 30s
      flush_interval: 10m
    children:
      - name: examples/clicks
      - name: examples/orders
        fragment: {compression_codec: GZIP}

Durations use Go's syntax (``1m30s``, ``24h``, ``500ms``).
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

from pyspark_gazette.errors import InvalidInputError, SpecError
from pyspark_gazette.protocol import codec_from_name, codec_name, pb
from pyspark_gazette.protocol.durations import duration_seconds, format_duration, parse_duration, set_duration

_FLAG_NAMES = {"O_RDONLY": 1, "O_WRONLY": 2, "O_RDWR": 4, "NOT_SPECIFIED": 0}
_NODE_KEYS = {
    "name",
    "replication",
    "labels",
    "fragment",
    "flags",
    "max_append_rate",
    "children",
    "revision",
    "delete",
    "suspend",
}
_FRAGMENT_KEYS = {
    "length",
    "compression_codec",
    "stores",
    "refresh_interval",
    "retention",
    "flush_interval",
    "path_postfix_template",
}


@dataclasses.dataclass
class SpecNode:
    """A journal of a spec document: its complete spec and what to do with it."""

    spec: pb.JournalSpec
    revision: int = 0
    delete: bool = False


def load_specs(text: str) -> list[SpecNode]:
    """Parse a YAML document (one tree, or several ``---`` documents) into journal specs."""
    import yaml

    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as e:
        raise SpecError(f"journal spec YAML does not parse: {e}") from e
    out: list[SpecNode] = []
    for doc in docs:
        _walk(doc, {}, "", out)
    names = [n.spec.name for n in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SpecError(f"journal(s) listed twice: {', '.join(dupes)}")
    return out


def load_spec_file(path: str, flag: str, stdin: Any = None) -> list[SpecNode]:
    """:func:`load_specs` of the file ``path`` (``-`` reads ``stdin``), every error an
    :class:`~pyspark_gazette.errors.InvalidInputError` that starts with ``flag`` and the path."""
    try:
        if path == "-" and stdin is not None:
            text = stdin.read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
    except OSError as e:
        raise InvalidInputError(f"{flag} {path}: {e.strerror or e}") from None
    try:
        return load_specs(text)
    except ValueError as e:
        raise InvalidInputError(f"{flag} {path}: {e}") from None


def spec_from_mapping(name: str, fields: dict[str, Any]) -> pb.JournalSpec:
    """The spec of journal ``name`` from a mapping of node fields (no children). Unlike a gazctl
    spec file, the mapping's labels may come in any order (the spec's are sorted)."""
    out: list[SpecNode] = []
    fields = dict(fields)
    labels = fields.get("labels")
    if isinstance(labels, list) and all(isinstance(lb, dict) and "name" in lb for lb in labels):
        fields["labels"] = sorted(labels, key=lambda lb: (str(lb["name"]), str(lb.get("value", ""))))
    _walk({**fields, "name": name}, {}, "", out)
    return out[0].spec


def _walk(node: Any, inherited: dict[str, Any], parent: str, out: list[SpecNode]) -> None:
    if not isinstance(node, dict):
        raise SpecError(f"a spec node must be a mapping, not {type(node).__name__} (under {parent!r})")
    unknown = {str(k) for k in node} - _NODE_KEYS
    name = node.get("name", "")
    if not isinstance(name, str):
        raise SpecError(f"a spec node under {parent!r} has a name that is not a string: {name!r}")
    if unknown:
        raise SpecError(f"spec node {name!r}: unknown key(s) {', '.join(sorted(unknown))}")
    if not name:
        raise SpecError(f"a spec node under {parent!r} has no name")
    if parent and not name.startswith(parent):
        raise SpecError(f"spec node {name!r} must start with its parent's name {parent!r}")
    merged = _merge(inherited, node, name)
    children = node.get("children") or []
    if name.endswith("/"):
        if not isinstance(children, list):
            raise SpecError(f"spec node {name!r}: children must be a list")
        _check_children_ordered(name, children)
        for child in children:
            _walk(child, merged, name, out)
        return
    if children:
        raise SpecError(f"journal {name!r} (no trailing '/') cannot have children")
    spec = _to_spec(name, merged)
    revision = node.get("revision", merged.get("revision", 0)) or 0
    if not isinstance(revision, int) or isinstance(revision, bool):
        raise SpecError(f"journal {name!r}: revision must be an integer, not {revision!r}")
    out.append(SpecNode(spec=spec, revision=revision, delete=bool(node.get("delete", False))))


def _check_children_ordered(name: str, children: list[Any]) -> None:
    """gazctl refuses a tree whose children are not in strictly increasing name order; so do we,
    so that a file we accept is one gazctl accepts (docs/protocol.md, journal specs)."""
    names: list[str] = [c["name"] for c in children if isinstance(c, dict) and isinstance(c.get("name"), str)]
    for prev, cur in itertools.pairwise(names):
        if cur <= prev:
            raise SpecError(
                f"spec node {name!r}: children must be ordered by name, as gazctl requires ({cur!r} comes after {prev!r})"
            )


def _check_labels_ordered(name: str, items: list[tuple[str, str]]) -> None:
    """Gazette unions a node's labels with its parent's assuming both are sorted by name, then
    value, with no repeats; an unsorted node yields a spec the broker refuses."""
    for prev, cur in itertools.pairwise(items):
        if cur <= prev:
            raise SpecError(
                f"spec node {name!r}: labels must be sorted by name then value without repeats, as gazctl "
                f"requires ({cur[0]}={cur[1]!r} comes after {prev[0]}={prev[1]!r})"
            )


def _merge(parent: dict[str, Any], node: dict[str, Any], name: str) -> dict[str, Any]:
    merged = dict(parent)
    for key in ("replication", "flags", "max_append_rate", "suspend"):
        if key in node:
            merged[key] = node[key]
    if "labels" in node:
        labels = dict(parent.get("labels", {}))
        new: dict[str, list[str]] = {}
        items: list[tuple[str, str]] = []
        for item in node["labels"] or []:
            if not isinstance(item, dict) or "name" not in item:
                raise SpecError(f"spec node {name!r}: each label needs a name (and a value)")
            items.append((str(item["name"]), str(item.get("value", ""))))
            new.setdefault(items[-1][0], []).append(items[-1][1])
        _check_labels_ordered(name, items)
        labels.update(new)
        merged["labels"] = labels
    if "fragment" in node:
        frag = node["fragment"] or {}
        if not isinstance(frag, dict):
            raise SpecError(f"spec node {name!r}: fragment must be a mapping")
        unknown = set(frag) - _FRAGMENT_KEYS
        if unknown:
            raise SpecError(f"spec node {name!r}: unknown fragment key(s) {', '.join(sorted(unknown))}")
        merged["fragment"] = {**parent.get("fragment", {}), **frag}
    return merged


def _to_spec(name: str, fields: dict[str, Any]) -> pb.JournalSpec:
    """Build the spec; a value of the wrong type or range (``replication: {}``, a length past
    int64) is a :class:`SpecError` naming the journal, never a bare TypeError/ValueError."""
    try:
        return _build_spec(name, fields)
    except SpecError:
        raise
    except (TypeError, ValueError, AttributeError, OverflowError) as e:
        raise SpecError(f"journal {name!r}: invalid spec value: {e}") from None


def _build_spec(name: str, fields: dict[str, Any]) -> pb.JournalSpec:
    spec = pb.JournalSpec(name=name, replication=int(fields.get("replication", 1)))
    for label_name, values in sorted(fields.get("labels", {}).items()):
        for value in sorted(set(values)):
            spec.labels.labels.add(name=label_name, value=value)
    flags = fields.get("flags", 0)
    if isinstance(flags, str):
        try:
            flags = sum(_FLAG_NAMES[f.strip()] for f in flags.split("|"))
        except KeyError as e:
            raise SpecError(f"journal {name!r}: unknown flag {e.args[0]!r}") from None
    spec.flags = int(flags)
    spec.max_append_rate = int(fields.get("max_append_rate", 0))
    frag = fields.get("fragment", {})
    where = f"journal {name!r} fragment"
    if "length" in frag:
        spec.fragment.length = int(frag["length"])
    if "compression_codec" in frag:
        codec = frag["compression_codec"]
        try:
            value = codec if isinstance(codec, int) else codec_from_name(str(codec))
            spec.fragment.compression_codec = value  # type: ignore[assignment]
        except ValueError as e:
            raise SpecError(f"{where}: {e}") from None
    spec.fragment.stores.extend(str(s) for s in frag.get("stores", []) or [])
    for key in ("refresh_interval", "retention", "flush_interval"):
        if key in frag:
            set_duration(getattr(spec.fragment, key), parse_duration(frag[key], where=f"{where}.{key}"))
    spec.fragment.path_postfix_template = str(frag.get("path_postfix_template", "") or "")
    if "suspend" in fields and fields["suspend"]:
        sus = fields["suspend"]
        spec.suspend.level = pb.JournalSpec.Suspend.Level.Value(str(sus.get("level", "NONE")))
        spec.suspend.offset = int(sus.get("offset", 0))
    return spec


def spec_to_dict(spec: pb.JournalSpec, revision: int | None = None) -> dict[str, Any]:
    """A journal spec as a YAML-ready mapping in the layout :func:`load_specs` reads."""
    out: dict[str, Any] = {"name": spec.name, "replication": spec.replication}
    if spec.labels.labels:
        out["labels"] = [{"name": lb.name, "value": lb.value} for lb in spec.labels.labels]
    f = spec.fragment
    frag: dict[str, Any] = {
        "length": f.length,
        "compression_codec": codec_name(f.compression_codec),
        "stores": list(f.stores),
        "refresh_interval": format_duration(duration_seconds(f.refresh_interval)),
    }
    if duration_seconds(f.retention):
        frag["retention"] = format_duration(duration_seconds(f.retention))
    if duration_seconds(f.flush_interval):
        frag["flush_interval"] = format_duration(duration_seconds(f.flush_interval))
    if f.path_postfix_template:
        frag["path_postfix_template"] = f.path_postfix_template
    out["fragment"] = frag
    if spec.flags:
        out["flags"] = spec.flags
    if spec.max_append_rate:
        out["max_append_rate"] = spec.max_append_rate
    if spec.HasField("suspend") and spec.suspend.level:
        out["suspend"] = {"level": pb.JournalSpec.Suspend.Level.Name(spec.suspend.level), "offset": spec.suspend.offset}
    if revision is not None:
        out["revision"] = revision
    return out


def dump_specs(specs: list[tuple[pb.JournalSpec, int]]) -> str:
    """YAML of ``(spec, mod_revision)`` pairs, as one tree that :func:`load_specs` reads back."""
    import os.path

    import yaml

    names = [s.name for s, _ in specs]
    common = os.path.commonprefix(names)
    root = common[: common.rfind("/") + 1]
    children = [spec_to_dict(s, rev) for s, rev in sorted(specs, key=lambda sr: sr[0].name)]
    if not root:
        # A tree needs a directory root; without a shared prefix emit one document per journal.
        return "---\n".join(yaml.safe_dump(c, sort_keys=False) for c in children)
    return yaml.safe_dump({"name": root, "children": children}, sort_keys=False)
