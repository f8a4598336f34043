"""How the arrays of a checkpoint written in the background cross from a
GPU's or TPU's memory to the host: whole, all at once, or a piece a step
over the interval before the next checkpoint.

A device has one queue of copies to the host. A step reads small results
(its energy, its acceptance) through it at its end, and a read that comes
behind a checkpoint's arrays waits for all of them: a whole copy slows the
steps it overlaps by about its length (on a TPU v5e, 121 MB every 100
steps of 4.5 ms cost the loop 5 %). Cut into pieces, each crossing in a
fraction of a step and started by the run's own thread at a step's end
(the one moment it is sure no read of the step is queued), a piece has
crossed before the next step reads: the steps wait for none of it.

    times = CrossingTimes()                             # one per checkpoint writer
    pace = times.plan(total_bytes, steps_between, step, rest_seconds)
    ... to_host(snapshot, pace) ...                     # the write's thread: cuts the pieces, fetches them in turn
    pace.step_ended()                                   # the run's thread, every step's end: the next piece's copy
    times.measured(pace)                                # once the write ended

The plan is made from what the run's earlier writes measured: the rate of
a whole copy, and the rest of a write after its arrays crossed (encoding,
writing, fsyncs). Pieces are planned only where they all cross within
80 % of the interval with the rest after them, one a step: else, and before
anything was measured, the copies are whole. A piece is a slice of an
array's first axis, cut on the device by one compiled function per
array's shape and piece length (compiled at the first paced write). A
write the run's thread takes over (the next checkpoint, the run's end)
copies the pieces left without waiting for steps.
"""

from __future__ import annotations

import collections
import functools
import threading
from dataclasses import dataclass, field

import jax
import numpy as np

PIECE_FLOOR = 2**20  # bytes: smaller pieces spare the steps nothing more
PIECE_CEILING = 16 * 2**20  # bytes
# a piece crosses in at most this share of a typical step: started at a
# step's end, it has crossed before the next step reads its results at its end
PIECE_STEP_SHARE = 0.5
HOST_SHARE = 0.8  # the pieces and the rest of the write end within this share of the interval


@dataclass
class Pace:
    """How one write's arrays cross: ``piece_bytes`` 0, whole (every copy
    started at once); else in pieces of at most that many bytes, one
    started at each step's end. What the crossing measured: ``bytes``
    copied whole and ``busy`` seconds copying them, ``pieces`` crossed,
    and when the crossing ``ended`` (a monotonic time)."""

    piece_bytes: int = 0
    bytes: int = 0
    busy: float = 0.0
    pieces: int = 0
    ended: float = 0.0
    _waiting: collections.deque = field(default_factory=collections.deque, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def queue(self, piece) -> threading.Event:
        """A piece (a device array) to cross: its copy is started at the next
        step's end; the event is set then."""
        started = threading.Event()
        with self._lock:
            self._waiting.append((piece, started))
        return started

    def step_ended(self) -> None:
        """The run's thread, at a step's end: starts the next piece's copy."""
        with self._lock:
            if not self._waiting:
                return
            piece, started = self._waiting.popleft()
        piece.copy_to_host_async()
        started.set()


class CrossingTimes:
    """What the crossings of one writer's checkpoints measured: the rate of
    a whole copy (bytes a second)."""

    def __init__(self):
        self.whole_rate: float | None = None

    def measured(self, pace: Pace) -> None:
        if not pace.piece_bytes and pace.busy > 0 and pace.bytes:
            self.whole_rate = pace.bytes / pace.busy

    def plan(self, total_bytes: int, steps_between: int, step: float | None, rest: float) -> Pace:
        """How ``total_bytes`` in arrays cross when the next checkpoint comes
        ``steps_between`` steps of ``step`` seconds after this one and the
        rest of a write took ``rest`` seconds: in pieces that cross in
        :data:`PIECE_STEP_SHARE` of a step at the measured rate, one a
        step, if they and the rest end within :data:`HOST_SHARE` of the
        interval; else whole."""
        rate = self.whole_rate
        if not (rate and step) or steps_between < 2 or total_bytes < 2 * PIECE_FLOOR:
            return Pace()
        piece = int(min(PIECE_CEILING, max(PIECE_FLOOR, rate * step * PIECE_STEP_SHARE)))
        if piece / rate > step * PIECE_STEP_SHARE:  # the smallest piece would still be crossing when the step reads
            return Pace()
        pieces = -(-total_bytes // piece)
        if pieces + rest / step > HOST_SHARE * steps_between:
            return Pace()
        return Pace(piece_bytes=piece)


def rows_per_piece(array, piece_bytes: int) -> int:
    """Rows of ``array``'s first axis per piece of at most ``piece_bytes``
    (at least one), or 0 if it crosses whole: small, one row, or spread
    over several devices."""
    if not piece_bytes or array.ndim == 0 or array.shape[0] < 2 or array.nbytes < 2 * piece_bytes:
        return 0
    if len(array.sharding.device_set) != 1:
        return 0
    return max(1, piece_bytes // (array.nbytes // array.shape[0]))


def crossed(holder, rows: int, pace: Pace):
    """The array ``holder`` holds (an :class:`~nkserde.saving.snapshot.OnDevice`)
    copied to the host a piece of ``rows`` rows at a time, as a generator
    of steps; the holder then holds the host array. The pieces are cut at
    once, and the whole device array let go; each piece's copy is started
    at a step's end by the run's thread (``pace.step_ended``), and a step
    yields the event of the next piece, which a background thread waits
    for (a caller that took the write over does not: a piece whose copy
    nobody started is copied as it is read)."""
    array, holder.held = holder.held, None
    out = np.empty(array.shape, array.dtype)
    starts = range(0, array.shape[0], rows)
    cut = _cut(array.shape[0], rows)(array)
    del array
    started = [pace.queue(piece) for piece in cut]
    for start, piece, event in zip(starts, cut, started):
        yield event
        out[start : start + rows] = np.asarray(piece)
        pace.pieces += 1
    holder.held = out


@functools.lru_cache(maxsize=64)
def _cut(length: int, rows: int):
    """A compiled function that cuts an array of ``length`` rows into
    pieces of ``rows`` rows (the last shorter), on its device."""
    bounds = [(start, min(start + rows, length)) for start in range(0, length, rows)]
    return jax.jit(lambda x: tuple(x[a:b] for a, b in bounds))
