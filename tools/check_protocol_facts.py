"""Check the compiled protocol descriptors against Gazette's wire facts (tools/facts/*.json).

The facts table (every message field's number, type and repeatedness, every enum value and every
RPC's types and streaming) is the data of the facts sheet cited in docs/protocol.md; the
repository keeps its own copy so the check needs nothing outside it. Exit status 0 when every
fact matches, 1 otherwise. Prints ``N/N protocol facts match``.
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any

FACTS = pathlib.Path(__file__).resolve().parent / "facts" / "gazette-protocol-fields.json"


def _type_name(field: Any) -> str:
    from google.protobuf.descriptor import FieldDescriptor

    if field.type == FieldDescriptor.TYPE_MESSAGE:
        return field.message_type.full_name
    if field.type == FieldDescriptor.TYPE_ENUM:
        return field.enum_type.full_name
    names = {
        getattr(FieldDescriptor, k): k[len("TYPE_") :].lower() for k in dir(FieldDescriptor) if k.startswith("TYPE_")
    }
    return names[field.type]


def observed(file_descriptor: Any) -> dict[str, dict[str, Any]]:
    """The facts of a compiled FileDescriptor, in the facts table's shape."""
    out: dict[str, dict[str, Any]] = {"messages": {}, "enums": {}, "services": {}}

    def enum(e: Any) -> None:
        out["enums"][e.full_name] = {v.name: v.number for v in e.values}

    def message(m: Any) -> None:
        out["messages"][m.full_name] = {
            f.name: {"number": f.number, "type": _type_name(f), "repeated": bool(f.is_repeated)} for f in m.fields
        }
        for nested in m.nested_types:
            message(nested)
        for e in m.enum_types:
            enum(e)

    for m in file_descriptor.message_types_by_name.values():
        message(m)
    for e in file_descriptor.enum_types_by_name.values():
        enum(e)
    for s in file_descriptor.services_by_name.values():
        out["services"][s.full_name] = {
            m.name: {
                "input": m.input_type.full_name,
                "output": m.output_type.full_name,
                "client_streaming": m.client_streaming,
                "server_streaming": m.server_streaming,
            }
            for m in s.methods
        }
    return out


def mismatches(facts: dict[str, Any], seen: dict[str, dict[str, Any]]) -> tuple[int, list[str]]:
    """(number of facts, what differs) for every fact of the table."""
    total, problems = 0, []
    for kind in ("messages", "enums", "services"):
        for name, members in facts[kind].items():
            for member, want in members.items():
                total += 1
                got = seen[kind].get(name, {}).get(member)
                if got != want:
                    problems.append(f"{kind} {name}.{member}: want {want}, got {got}")
    return total, problems


def main() -> int:
    from pyspark_gazette.protocol import pb

    facts = json.loads(FACTS.read_text(encoding="utf-8"))
    total, problems = mismatches(facts, observed(pb.DESCRIPTOR))
    for p in problems:
        print("MISMATCH", p)
    print(f"{total - len(problems)}/{total} protocol facts match")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
