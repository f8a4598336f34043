"""The structure-aware mutation of any file the reader target reads: a
history log's by fuzz/mutate_history.py, an nkserde file's by
fuzz/mutate.py. ``mutate(data, rng)`` returns new bytes, or None where the
data does not parse or the mutation does not apply."""

from __future__ import annotations

import random

import mutate as nks_file
import mutate_history

HISTORY_MAGIC = mutate_history.MAGIC


def mutate(data: bytes, rng: random.Random) -> bytes | None:
    if data.startswith(HISTORY_MAGIC):
        return mutate_history.mutate(data, rng)
    return nks_file.mutate(data, rng)
