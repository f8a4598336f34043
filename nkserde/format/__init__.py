"""Bytes on disk.

This package knows how an nkserde file is laid out and how to write and read
one; it knows nothing of NetKet or of the type registry. Its input is a
*plain tree*: nested dicts / lists of Python scalars, strings, bytes, ``None``
and C-contiguous-able numpy arrays.

Layout of a file (all integers little-endian)::

    offset 0   preamble, 16 bytes: MAGIC (8) | format version u32 | flags u32
    offset 64  array payload: each array at a 64-byte aligned offset,
               raw bytes or one zstd frame, in tree order
    ...        header: msgpack map {format_version, meta, tree, arrays}
    end - 32   trailer, 32 bytes: header offset u64 | header length u64 |
               header xxh3-64 u64 | END_MAGIC (8)

The header sits after the payload so that a save is one streaming pass: the
stored length of a compressed array is only known once it has been written.
A reader reads the fixed-size trailer, then the header, then the arrays.

Imports: errors, types/ (a state dict's values over processes and its
walk; never the registry).
"""

from .layout import FORMAT_VERSION, MAGIC
from .reader import (
    LazyArray,
    LazyFile,
    malformed_tree,
    materialize,
    read_arrays,
    read_file,
    read_header,
    read_index,
    verify_steps,
)
from .writer import drain, write_file, write_file_steps

__all__ = [
    "malformed_tree",
    "FORMAT_VERSION",
    "LazyArray",
    "LazyFile",
    "MAGIC",
    "drain",
    "materialize",
    "read_arrays",
    "read_file",
    "read_header",
    "read_index",
    "write_file",
    "write_file_steps",
    "verify_steps",
]
