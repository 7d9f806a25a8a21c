"""The JournalSpec builder shared by the Spark tests and the real-Gazette tests."""

from __future__ import annotations


def make_spec(
    name,
    *,
    store="file:///store/",
    length=1 << 20,
    codec=None,
    content_type="application/x-ndjson",
    labels=None,
    refresh_seconds=1,
):
    from pyspark_gazette.protocol import label_set, pb

    spec = pb.JournalSpec(name=name, replication=1)
    all_labels = dict(labels or {})
    if content_type:
        all_labels["content-type"] = content_type
    spec.labels.CopyFrom(label_set(all_labels))
    spec.fragment.length = length
    spec.fragment.compression_codec = pb.ZSTANDARD if codec is None else codec
    if store:
        spec.fragment.stores.append(store)
    spec.fragment.refresh_interval.seconds = refresh_seconds
    return spec
