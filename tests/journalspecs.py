"""The one JournalSpec builder of the tests and the benches.

Tests import it as ``from journalspecs import make_spec`` (``tests/`` is on pytest's path);
benches through ``bench/benchlib.py``, which puts ``tests/`` on ``sys.path``.
"""

from __future__ import annotations


def make_spec(
    name,
    *,
    store="file:///store/",
    stores=None,
    length=1 << 20,
    codec=None,
    content_type="application/x-ndjson",
    labels=None,
    refresh_seconds=1,
    flush_seconds=0,
    template="",
    flags=0,
):
    """A one-replica JournalSpec.

    ``store`` is its one fragment store (none when empty) unless ``stores`` lists them; ``codec``
    is a ``pb.CompressionCodec`` value or name (default ZSTANDARD); ``content_type`` becomes the
    ``content-type`` label (none when empty), beside ``labels``; durations are in seconds.
    """
    from pyspark_gazette.protocol import label_set, pb
    from pyspark_gazette.protocol.durations import set_duration
    from pyspark_gazette.protocol.labels import CONTENT_TYPE

    spec = pb.JournalSpec(name=name, replication=1, flags=flags)
    all_labels = dict(labels or {})
    if content_type:
        all_labels[CONTENT_TYPE] = content_type
    spec.labels.CopyFrom(label_set(all_labels))
    spec.fragment.length = length
    if codec is None:
        codec = pb.ZSTANDARD
    spec.fragment.compression_codec = getattr(pb, codec) if isinstance(codec, str) else codec
    spec.fragment.stores.extend(list(stores) if stores is not None else [store] if store else [])
    set_duration(spec.fragment.refresh_interval, refresh_seconds)
    if flush_seconds:
        set_duration(spec.fragment.flush_interval, flush_seconds)
    spec.fragment.path_postfix_template = template
    return spec
