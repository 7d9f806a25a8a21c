"""Fragment files: content names, codecs, reading, and store access.

This is the only package that talks to storage SDKs (fsspec, s3fs, gcsfs, adlfs).

* :mod:`.names`: :class:`FragmentRef` and content names (``<begin>-<end>-<sha1><ext>``);
* :mod:`.codecs`: streaming decompressors and compressors per ``CompressionCodec``;
* :mod:`.reader`: :class:`FragmentReader`, content from an offset to the fragment end, checked;
* :mod:`.stores`: :class:`FragmentStore` (put, list, open, sign, delete, health) per store URL;
* :mod:`.urls`: :func:`open_fragment_url`, direct reads of signed fragment URLs.
"""

from __future__ import annotations

from pyspark_gazette.fragments.codecs import (
    GZIP_MEMBER_SIZE,
    Compressor,
    compress_bytes,
    decompress_bytes,
    open_decompressor,
)
from pyspark_gazette.fragments.names import EXTENSIONS, ZERO_SUM, FragmentRef, content_name, parse_content_name
from pyspark_gazette.fragments.reader import FragmentReader
from pyspark_gazette.fragments.stores import FragmentStore, StoreURL, parse_store_url, require_package
from pyspark_gazette.fragments.urls import FragmentURLStream, open_fragment_url

__all__ = [
    "EXTENSIONS",
    "GZIP_MEMBER_SIZE",
    "ZERO_SUM",
    "Compressor",
    "FragmentReader",
    "FragmentRef",
    "FragmentStore",
    "FragmentURLStream",
    "StoreURL",
    "compress_bytes",
    "content_name",
    "decompress_bytes",
    "open_decompressor",
    "open_fragment_url",
    "parse_content_name",
    "parse_store_url",
    "require_package",
]
