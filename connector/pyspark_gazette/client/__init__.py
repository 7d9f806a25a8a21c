"""Gazette journal client: list, apply, fragments, read (with retries), append (with batching)."""

from pyspark_gazette.client.append_service import AppendService, AsyncAppend
from pyspark_gazette.client.appender import Appender, append
from pyspark_gazette.client.client import JournalClient
from pyspark_gazette.client.conn import ClientConfig, Connections, backoff, parse_address
from pyspark_gazette.client.list_apply import (
    Change,
    JournalInfo,
    JournalListWatch,
    ListedFragment,
    apply,
    apply_in_batches,
    get_journal,
    list_fragments,
    list_journals,
    watch_journals,
)
from pyspark_gazette.client.reader import Reader, RetryReader

__all__ = [
    "AppendService",
    "Appender",
    "AsyncAppend",
    "Change",
    "ClientConfig",
    "Connections",
    "JournalClient",
    "JournalInfo",
    "JournalListWatch",
    "ListedFragment",
    "Reader",
    "RetryReader",
    "append",
    "apply",
    "apply_in_batches",
    "backoff",
    "get_journal",
    "list_fragments",
    "list_journals",
    "parse_address",
    "watch_journals",
]
