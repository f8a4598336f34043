"""What defines a run, computed from content: the "same script?" test of a
resume (docs/guides/resume.md, "The same script? fingerprint").

:func:`fingerprint` describes a driver as a flat ``{key: text}`` dict of
what the user chose, e.g. ``{"operator": "content 3f2a...", "model": "RBM",
"model.alpha": "1", "n_samples": "512", "optimizer": "effect 9c1e..."}``,
plus readable entries (``"operator | h": "1.0"``) that name what a hash
stands for; :func:`differences` compares two and words each change. Every
entry is computed from values, never from a ``repr`` that may hold a
process's ``hash()`` (flax ``HashableArray``) or a memory address, or leave
data out (``LocalOperatorJax`` shows no couplings).

    driver.py       fingerprint(driver): the entries of a driver and its states
    walk.py         any object as entries, field by field; arrays, spaces, graphs
    operators.py    operators by their action; their numbers and Pauli terms
    optimizers.py   optax optimizers by their effect; their kind and hyperparameters
    functions.py    functions of one argument by their values on fixed inputs; the probes' results, kept
    parts.py        the parts and names of Python objects
    entries.py      the flat dict: versions, readable entries, hash prefixes; numbers, hashes, digests as text
    compare.py      two fingerprints compared, each change in words; version 2 in version 3's keys
"""

from .compare import changes, comparable, differences
from .driver import fingerprint
from .entries import READABLE, VERSION

__all__ = ["READABLE", "VERSION", "changes", "comparable", "differences", "fingerprint"]
