"""The options file: data source options from the file named by ``PYSPARK_GAZETTE_CONF``.

A cluster usually sets the same connection options for every query (the broker address, the
store's file root or S3 endpoint). Putting them in one file that the driver reads when it parses
a query's options keeps notebooks and jobs free of them; it is the lowest layer of precedence:
explicit options, then ``PYSPARK_GAZETTE_<KEY>`` variables, then this file.

The format is the plain subset of Java ``.properties``: one ``key=value`` (or ``key: value``)
per line, the separator being the first ``=`` or ``:``, blanks around keys and values ignored,
``#`` and ``!`` starting comment lines. Escapes and backslash line continuations are not
supported and are refused, so a file written for Java is never silently misread. Keys are
option names (case-insensitive); an unknown or repeated key is an error naming the file and line,
since a typo in a file nobody looks at would otherwise be ignored on every query.
"""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Mapping

from pyspark_gazette.errors import OptionError
from pyspark_gazette.spark.options.kafka import kafka_hint

CONF_ENV = "PYSPARK_GAZETTE_CONF"


@dataclasses.dataclass(frozen=True)
class FileValue:
    """One option's raw value and where it was written (for error messages)."""

    value: str
    path: str
    line: int

    @property
    def where(self) -> str:
        return f"{self.path}, line {self.line}"


def parse_options_file(text: str, path: str, known: Mapping[str, str]) -> dict[str, FileValue]:
    """``{lower-case key: FileValue}`` of ``text``; ``known`` maps lower-case keys to their spelling."""
    out: dict[str, FileValue] = {}
    for number, raw_line in enumerate(text.splitlines(), start=1):
        line = raw_line.strip()
        if not line or line[0] in "#!":
            continue
        where = f"{path}, line {number}"
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise OptionError(CONF_ENV, f"{where}: expected key=value, got {line[:80]!r}")
        key, value = line[:cut].strip(), line[cut + 1 :].strip()
        if line.endswith("\\"):
            raise OptionError(key, f"{where}: backslash line continuations are not supported")
        canonical = known.get(key.lower())
        if canonical is None:
            kafka = kafka_hint(key)
            why = f"a Kafka name; {kafka[1]}" if kafka else "unknown option; see the options reference"
            raise OptionError(key, f"{where}: {why}")
        if key.lower() in out:
            raise OptionError(canonical, f"{where}: repeats line {out[key.lower()].line}")
        out[key.lower()] = FileValue(value, path, number)
    return out


def options_from_file(env: Mapping[str, str], known: Mapping[str, str]) -> dict[str, FileValue]:
    """The options of the file named by ``CONF_ENV`` in ``env`` (none when it is unset)."""
    name = env.get(CONF_ENV)
    if not name:
        return {}
    path = pathlib.Path(name).expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise OptionError(CONF_ENV, f"cannot read the options file {str(path)!r}: {e}") from None
    return parse_options_file(text, str(path), known)
