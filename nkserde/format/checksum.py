"""Checksums of header and array bytes.

xxh3-64 runs at about 9.5 GB/s on this class of machine against 2.1 GB/s for
``zlib.crc32`` (docs/explanations/performance.md): at CRC speed the
checksum alone would cost a third of a load from the page cache.
"""

from __future__ import annotations

import xxhash


def checksum(data) -> int:
    """xxh3-64 of a bytes-like object, as an unsigned int."""
    return xxhash.xxh3_64_intdigest(data)


def streaming_checksum():
    """An incremental hasher with ``update(bytes)`` and ``intdigest()``;
    equal to :func:`checksum` of the concatenated input."""
    return xxhash.xxh3_64()
