"""What an error of a multi-process run says when a process of it was lost
(its node down, cut off the network, rebooted, or the process killed), as
opposed to an error of the run itself.

JAX's collectives fail when a peer's connection breaks: gloo's (CPUs)
``Gloo all-reduce failed: [.../pair.cc:547] Connection closed by peer
[10.77.0.12]:17608`` (raised as a ValueError by jax 0.10), NCCL's (GPUs)
``NCCL operation ... failed: ... remote process exited or there was a
network error``; a request to JAX's coordination service fails once
process 0, which serves it, is gone. nkserde's own waits for the others
raise :class:`~nkserde.errors.PeerLostError`, and a store that fails
:class:`~nkserde.errors.DistributedSaveError`.

    lost_process(error)   # "process 1 of the run was lost (...)", or None: the run's own error
"""

from __future__ import annotations

import re

from ..errors import DistributedSaveError, PeerLostError

# the messages of a collective, or of the coordination service, whose peer vanished
_LOST_PEER = re.compile(
    r"Gloo \S+ failed|NCCL\b.*\b(failed|error)|remote process exited|"
    r"Failed to send RPC to coordination service|coordination service failed",
    re.IGNORECASE | re.DOTALL,
)


def lost_process(error: BaseException) -> str | None:
    """What was lost, in a user's words, if ``error`` is how a lost process
    of the run surfaced in this one; else None."""
    text = " ".join(str(error).split())
    if isinstance(error, PeerLostError):
        missing = getattr(error, "missing", [])
        who = f"process {', '.join(map(str, missing))} of the run" if missing else "a process of the run"
        return f"{who} was lost ({text})"
    if isinstance(error, DistributedSaveError) and "coordination service failed" in text:
        return f"process 0 of the run was lost ({text[:300]})"
    if isinstance(error, Exception) and _LOST_PEER.search(text):
        return f"a process of the run was lost (a collective failed: {text[:300]})"
    return None
