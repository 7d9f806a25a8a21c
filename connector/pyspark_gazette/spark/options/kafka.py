"""Spark's Kafka options a user is likely to try here, each with what to use instead.

An option that is not ours is refused (:func:`~pyspark_gazette.spark.options.parsing.parse`); when
it is a name of Spark's Kafka source or sink, the error says so and names our option that does
the same, or why none is needed. A Kafka name whose meaning is the same here is simply our option
(``startingOffsets``, ``failOnDataLoss``, ``minPartitions``, ``maxTriggerDelay`` ...), and
``maxOffsetsPerTrigger`` is in the option table (refused there, naming ``maxBytesPerTrigger``).
"""

from __future__ import annotations

_JOURNALS = 'name the journals in load() ("a/one,a/two") or the journals option, or select them by label with selector'
_SECURITY = "TLS is an https:// broker.address, and a bearer token (a JWT) goes in broker.authToken"
_TIMESTAMP = "one time for every journal, in milliseconds since the epoch, compared with fragment persist times"

#: Kafka option (as Spark's Kafka source spells it) -> what to do here instead.
KAFKA_OPTIONS: dict[str, str] = {
    "subscribe": f"journals are not topics: {_JOURNALS}",
    "subscribePattern": "journals are chosen by labels, not patterns: a selector such as "
    "'name:prefix=a/' reads every journal under a/ (or list them in load() or the journals option)",
    "assign": f"offsets are per journal, not per partition: {_JOURNALS}, and give offsets with startingOffsets",
    "topic": f"for a write, name the journal with the journal option (or the save() path); for a read, {_JOURNALS}",
    "startingOffsetsByTimestamp": f"use startingTimestamp: {_TIMESTAMP}",
    "endingOffsetsByTimestamp": f"use endingTimestamp: {_TIMESTAMP}",
    "startingOffsetsByTimestampStrategy": "startingTimestamp starts each journal at its first fragment "
    "persisted at or after it; there is no other strategy",
    "minOffsetsPerTrigger": "Gazette offsets are bytes: use minBytesPerTrigger (e.g. 16m)",
    "maxRecordsPerPartition": "Gazette offsets are bytes: use maxPartitionBytes to split reads into smaller partitions",
    "includeHeaders": "Gazette messages have no headers: includeMetadata adds each message's UUID, "
    "producer, clock and flags as columns",
    "groupIdPrefix": "there are no consumer groups: a stream's progress is kept in its checkpointLocation",
    "kafkaConsumer.pollTimeoutMs": "use broker.timeout: how long a read keeps retrying while no broker answers",
    "fetchOffset.numRetries": "use broker.timeout: retries last as long as it says",
    "fetchOffset.retryIntervalMs": "use broker.timeout: retries back off on their own and last as long as it says",
}

#: ``kafka.<property>`` (Kafka client properties) -> what to do instead; other ``kafka.*`` keys
#: get :data:`_OTHER_KAFKA`.
KAFKA_PROPERTIES: dict[str, str] = {
    "kafka.bootstrap.servers": "use broker.address: the URL of a Gazette broker (several, comma-separated, "
    "are tried in turn), e.g. http://127.0.0.1:8080",
    "kafka.group.id": "there are no consumer groups: a stream's progress is kept in its checkpointLocation",
    "kafka.isolation.level": "use readCommitted=true for read_committed",
    "kafka.transactional.id": "use transactional=true for transactional writes",
    "kafka.security.protocol": _SECURITY,
}

#: ``kafka.<prefix>*`` -> what to do instead.
KAFKA_PREFIXES: dict[str, str] = {"kafka.ssl.": _SECURITY, "kafka.sasl.": _SECURITY}

_OTHER_KAFKA = (
    "none applies to Gazette: brokers are set with broker.address, "
    "broker.authToken and broker.timeout, fragment stores with the store.* options"
)

_BY_LOWER = {k.lower(): (k, v) for k, v in {**KAFKA_OPTIONS, **KAFKA_PROPERTIES}.items()}


def kafka_hint(key: str) -> tuple[str, str] | None:
    """``(Kafka's spelling of key, what to use instead)`` when ``key`` (any case) is an option of
    Spark's Kafka source or sink or a ``kafka.*`` client property; else ``None``."""
    low = key.lower()
    if low in _BY_LOWER:
        return _BY_LOWER[low]
    for prefix, instead in KAFKA_PREFIXES.items():
        if low.startswith(prefix):
            return key, instead
    if low.startswith("kafka."):
        return key, _OTHER_KAFKA
    return None
