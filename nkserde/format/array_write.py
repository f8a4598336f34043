"""One array into a file being written: its bytes (little-endian, C
order), the dtype name the file stores, its codec and checksum.
:func:`stream_array_steps` streams an array at the next aligned offset, as
a one-process save and process 0 of a multi-process save do;
:func:`prepare_block` encodes a block in memory, as the other processes of
a multi-process save do (they must know its stored size before writing)."""

from __future__ import annotations

import sys
import threading

import numpy as np

from . import codecs
from .checksum import checksum, streaming_checksum
from .layout import PAYLOAD_START, aligned_offset, check_dtype

_ZEROS = bytes(PAYLOAD_START)


def _little_endian(array: np.ndarray) -> np.ndarray:
    bo = array.dtype.byteorder
    if bo == ">" or (bo == "=" and sys.byteorder == "big"):
        array = array.astype(array.dtype.newbyteorder("<"))
    # np.ascontiguousarray would turn a 0-d array into shape (1,)
    return array if array.flags.c_contiguous else array.copy(order="C")


def bytes_of(array: np.ndarray) -> memoryview:
    array = _little_endian(array)
    return memoryview(array.reshape(-1).view(np.uint8)) if array.size else memoryview(b"")


def stored_dtype(array, path=()) -> str:
    """The name a file stores ``array``'s dtype under (checked as the tree
    was encoded: layout.check_dtype)."""
    return check_dtype(array.dtype, path)


# Raw arrays from this size on are checksummed in a second thread while the
# first writes them: xxhash and the file's write both release the GIL, so
# on two cores a save costs the write alone (benchmarks/save_load.py).
PARALLEL_CHECKSUM = 8 << 20


class _Checksum(threading.Thread):
    """The checksum of ``data``, computed in a thread of its own."""

    def __init__(self, data):
        super().__init__(name="nkserde-checksum", daemon=True)
        self._data, self._digest, self._error = data, None, None
        self.start()

    def run(self):
        try:
            self._digest = checksum(self._data)
        except BaseException as exc:  # noqa: BLE001  (any error of this thread is re-raised in the writing one)
            self._error = exc

    def result(self) -> int:
        self.join()
        if self._error is not None:
            raise self._error
        return self._digest


def stream_array_steps(f, array: np.ndarray, position: int, digest: int | None = None):
    """Writes ``array`` at the next aligned offset after ``position``,
    choosing its codec, yielding after every ``codecs.CHUNK`` bytes of a raw
    array (another thread may take over the write there, see
    :func:`nkserde.format.writer.write_file_steps`). ``digest``: the array bytes' checksum if
    already known (used if it is stored raw). Returns its storage entry and
    the new position."""
    start = aligned_offset(position)
    f.write(_ZEROS[: start - position])
    data = bytes_of(array)
    codec, frame = codecs.choose_codec(data)
    if codec == codecs.RAW:
        hashing = None
        if digest is None:
            if data.nbytes >= PARALLEL_CHECKSUM:
                hashing = _Checksum(data)  # the same bytes, read while they are written
            else:
                digest = checksum(data)
        for chunk in range(0, data.nbytes, codecs.CHUNK):
            f.write(data[chunk : chunk + codecs.CHUNK])
            yield
        if hashing is not None:
            digest = hashing.result()
        stored = data.nbytes
    elif frame is not None:
        digest = checksum(frame)
        f.write(frame)
        stored = len(frame)
    else:
        hasher = streaming_checksum()
        stored = codecs.compress_stream(data, f.write, hasher)
        digest = hasher.intdigest()
    entry = {"offset": start, "stored": stored, "codec": codec, "checksum": digest}
    return entry, start + stored


def prepare_block(data: memoryview) -> tuple[str, memoryview | bytes, int]:
    """A block that another process than 0 writes: its length must be known
    before writing, so a compressed block is compressed in memory (the codec
    only compresses small arrays or large near-constant ones: the frame is
    at most a few percent of a large block)."""
    codec, frame = codecs.choose_codec(data)
    if codec == codecs.ZSTD and frame is None:
        chunks: list[bytes] = []
        codecs.compress_stream(data, chunks.append, streaming_checksum())
        frame = b"".join(chunks)
    payload = data if codec == codecs.RAW else frame
    return codec, payload, checksum(payload)
