"""Estuary Flow collections: the facts of how Flow lays a collection out on Gazette.

A Flow collection is a set of Gazette journals carrying JSON documents with a message UUID at
``/_meta/uuid``. This room holds the Flow rules the connector needs, with no Spark in it:

- :mod:`~pyspark_gazette.flow.labels`: the collection's labels (``estuary.dev/collection``,
  ``estuary.dev/field/<f>`` logical partitions and Flow's value encoding), the journal selector
  Flow builds for a collection, and decoding partition values from journal names.
- :mod:`~pyspark_gazette.flow.documents`: the UUID flags Flow relies on (ACK, and the CONTROL
  flag of ``_meta/backfillBegin`` / ``backfillComplete`` documents) and ``_meta/op``.
- :mod:`~pyspark_gazette.flow.hosted`: Estuary-hosted collections, authorized the way flowctl
  does (``/authorize/user/collection``).

The sources of these facts are listed in docs/flow.md.
"""
