"""How each array is stored: ``raw`` bytes or one ``zstd`` frame.

The choice is made per array, by trying, and recorded in the header:

* tiny arrays (up to ``TINY`` bytes) are compressed whole at level 1 and kept
  compressed if that saves at least 10%.
* every other array is first *sampled*: three slices of ``SAMPLE`` bytes
  (start, middle, end) are compressed, which costs a few percent of writing
  the array. Then
  - up to ``SMALL`` bytes, a sample that shrinks to ``SMALL_SAMPLE_RATIO``
    or less means the whole array is compressed and kept if it saves 10%:
    at that size time hardly matters, bytes (and a shared file system's
    round trips) do. Typical int8 Monte Carlo chains (1024 chains x 1000
    sites = 1 MB, ratio ~0.2) fall here;
  - larger arrays are compressed only if the sample shrinks to
    ``LARGE_RATIO`` or less. Only near-constant data (zeros, repeated
    values) compresses that well, and zstd handles it at several GB/s.
    Anything else (random weights at ratio ~0.95, big int8 chains at ratio
    ~0.2 but only ~0.25 GB/s) is written raw: compressing it would be slower
    than the disk.

The choice depends only on the bytes, so the same state gives the same file.
"""

from __future__ import annotations

import threading

import zstandard

RAW = "raw"
ZSTD = "zstd"
CODECS = (RAW, ZSTD)

TINY = 4 << 10
SMALL = 1 << 20
SAMPLE = 4 << 10
KEEP_RATIO = 0.9
SMALL_SAMPLE_RATIO = 0.5
LARGE_RATIO = 0.05
LEVEL = 1
MAX_WINDOW = 1 << 27
CHUNK = 4 << 20  # streaming granularity: bounds extra memory per array


# One compressor per thread (one may not be used by two threads at once):
# making one costs more than compressing a small array with it. Each call
# gives one whole frame, the same bytes as a new compressor's.
_COMPRESSORS = threading.local()


def _compress(data) -> bytes:
    compressor = getattr(_COMPRESSORS, "zstd", None)
    if compressor is None:
        compressor = _COMPRESSORS.zstd = zstandard.ZstdCompressor(level=LEVEL)
    return compressor.compress(data)


def _sample_ratio(data: memoryview) -> float:
    step = data.nbytes // 3
    sample = b"".join(bytes(data[i * step : i * step + SAMPLE]) for i in range(3))
    return len(_compress(sample)) / len(sample)


def choose_codec(data: memoryview) -> tuple[str, bytes | None]:
    """Returns ``(codec, compressed)``; ``compressed`` is the whole frame when
    the decision already produced it (small arrays), else None."""
    n = data.nbytes
    if n == 0:
        return RAW, None
    if n > TINY:
        ratio = _sample_ratio(data)
        if n > SMALL:
            return (ZSTD, None) if ratio <= LARGE_RATIO else (RAW, None)
        if ratio > SMALL_SAMPLE_RATIO:
            return RAW, None
    frame = _compress(data)
    return (ZSTD, frame) if len(frame) <= KEEP_RATIO * n else (RAW, None)


def compress_stream(data: memoryview, write, hasher) -> int:
    """Writes ``data`` as one zstd frame through ``write``, ``CHUNK`` bytes at
    a time, feeding the stored bytes to ``hasher``. Returns the stored length."""
    compressor = zstandard.ZstdCompressor(level=LEVEL).compressobj(size=data.nbytes)
    stored = 0
    for start in range(0, data.nbytes, CHUNK):
        out = compressor.compress(data[start : start + CHUNK])
        if out:
            hasher.update(out)
            write(out)
            stored += len(out)
    out = compressor.flush()
    hasher.update(out)
    write(out)
    return stored + len(out)


def stream_reader(frame):
    """A reader with ``readinto`` that decompresses ``frame`` (bytes-like)
    straight into the caller's buffer (the caller reads no more than the
    size it expects: a frame cannot expand beyond it). The window a frame
    may ask for is bounded (zstd's default, 128 MiB; level 1 uses 512 KiB)."""
    return zstandard.ZstdDecompressor(max_window_size=MAX_WINDOW).stream_reader(frame)


def content_size(frame) -> int | None:
    """The decompressed size a frame's header declares, None if it declares
    none (every frame nkserde writes declares it)."""
    try:
        size = zstandard.frame_content_size(frame)
    except zstandard.ZstdError:
        return None  # not a frame header: the decompressor will say so
    return size if size >= 0 else None


ZstdError = zstandard.ZstdError
