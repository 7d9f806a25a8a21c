"""Data source options: every key once, with its type, default and documentation.

The package: :mod:`~.table` (the option table), :mod:`~.parsing` (values, precedence, the
environment), :mod:`~.conf_file` (the options file), :mod:`~.connection` (brokers and stores) and
:mod:`~.query` (:class:`ReadOptions`, :class:`WriteOptions`); this module re-exports their names.

Spark hands a data source its options as a case-insensitive ``str -> str`` mapping. They are
parsed once, on the driver, into the frozen :class:`ReadOptions` / :class:`WriteOptions`, which
pickle to executors. Every error names the option (:class:`~pyspark_gazette.errors.OptionError`)
and unknown keys are rejected, so a typo fails at planning time instead of being ignored.

The options reference in the docs is generated from :data:`OPTIONS`; a test keeps the two equal.
Names follow Spark's Kafka source where the meaning is the same (``startingOffsets``,
``endingOffsets``, ``failOnDataLoss`` ...); a Kafka name whose unit would differ here
(``maxOffsetsPerTrigger``, records in Kafka) is refused rather than reinterpreted, and the
other names of Spark's Kafka source and sink (``subscribe``, ``topic``, ``kafka.*`` ...) are
refused naming what to use instead (:mod:`~.kafka`).

Values may also come from the environment: ``PYSPARK_GAZETTE_<KEY>`` with the key upper-cased
and dots as underscores (``PYSPARK_GAZETTE_BROKER_ADDRESS``), and ``broker.address`` also falls
back to ``BROKER_ADDRESS`` as Gazette's own tools do. Lowest of all comes the options file named
by ``PYSPARK_GAZETTE_CONF`` (:mod:`~pyspark_gazette.spark.options.conf_file`): explicit options win over
the environment, which wins over the file. Keys of the file that do not apply to a query's scope
are ignored (one file serves reads and writes alike).
"""

from __future__ import annotations

from pyspark_gazette.spark.options.connection import Connection, connection_from
from pyspark_gazette.spark.options.parsing import (
    check_offsets_name_read_journals,
    closest,
    env_name,
    parse,
    parse_duration,
    parse_offsets,
    redacted,
)
from pyspark_gazette.spark.options.query import ReadOptions, WriteOptions
from pyspark_gazette.spark.options.table import (
    ALL,
    BY_KEY,
    ENV_PREFIX,
    FRAMINGS,
    MODES,
    OPTIONS,
    READ,
    READS,
    STREAM,
    WRITE,
    Option,
    option,
)

__all__ = [
    "ALL",
    "BY_KEY",
    "ENV_PREFIX",
    "FRAMINGS",
    "MODES",
    "OPTIONS",
    "READ",
    "READS",
    "STREAM",
    "WRITE",
    "Connection",
    "Option",
    "ReadOptions",
    "WriteOptions",
    "check_offsets_name_read_journals",
    "closest",
    "connection_from",
    "env_name",
    "option",
    "parse",
    "parse_duration",
    "parse_offsets",
    "redacted",
]
