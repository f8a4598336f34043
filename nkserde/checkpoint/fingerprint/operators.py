"""Operators by their action: the connected configurations and matrix
elements of every basis state (of 64 states drawn with a fixed key when
the space is larger, also when it is too large for NetKet to count),
rounded to 10 significant digits and hashed. Not by their class: a numba
``LocalOperator`` and its jax version, an ``Ising`` and its
``LocalOperator`` are one operator.

Readable: the numbers a NetKet Hamiltonian is built from (``Ising`` ``h``,
``J``, its edges) and the terms of a LocalOperator or PauliStrings with
their coefficients (Pauli strings on spin-1/2 sites: ``term X0``,
``term Z0 Z1``; matrix elements on other sites)."""

from __future__ import annotations

import functools
import hashlib
import itertools
import re

import jax
import netket as nk
import numpy as np

from . import functions
from .entries import KIND, VERSION, number, sha

_MAX_STATES = 4096  # enumerate smaller spaces completely
_SAMPLED_STATES = 64
_MAX_TERMS = 4096  # operators with more terms are not listed term by term
_MAX_TERM_SITES = 4  # terms on more sites are described by their matrix, not Pauli strings
_TERM_BUDGET = 2**16  # Pauli strings tried over all terms: a few tenths of a second


def uncountable(op) -> bool:
    """Whether ``op``'s space is finite but too large for NetKet to count
    (``n_states`` raises: 64 spins and more)."""
    hilbert = getattr(op, "hilbert", None)
    if not isinstance(hilbert, nk.hilbert.DiscreteHilbert) or not hilbert.is_finite:
        return False
    try:
        hilbert.n_states
    except RuntimeError:  # NetKet: "too large to be indexed" (NotImplementedError: a space that cannot count)
        return True
    return False


def action_digest(op, version: int = VERSION) -> str | None:
    """:func:`computed_action_digest`, kept in the result cache."""
    return functions.memoized(
        "action",
        (op, version, _MAX_STATES, _SAMPLED_STATES),
        lambda: computed_action_digest(op, version),
        lambda digest: digest,
        lambda stored: stored if stored is None or isinstance(stored, str) else functions.not_a_stored_result(),
    )


def computed_action_digest(op, version: int = VERSION) -> str | None:
    """A hash of how ``op`` acts on basis states (all of them, or 64 drawn
    with a fixed key: the same states under every supported NetKet and JAX),
    or None if it cannot be computed (continuous spaces, operators without
    ``get_conn_padded``; ``version=2``: spaces too large to count, which
    version 2 described by the operator's fields)."""
    hilbert = getattr(op, "hilbert", None)  # (Infidelity_SR leaves a dataclasses.Field in _operator)
    if not isinstance(hilbert, nk.hilbert.DiscreteHilbert) or not hasattr(op, "get_conn_padded"):
        return None
    try:
        if uncountable(op):
            if version == 2:
                return None
            states = np.asarray(hilbert.random_state(jax.random.PRNGKey(0), _SAMPLED_STATES))
        elif hilbert.is_finite and hilbert.n_states <= _MAX_STATES:
            states = np.asarray(hilbert.all_states())
        else:
            states = np.asarray(hilbert.random_state(jax.random.PRNGKey(0), _SAMPLED_STATES))
        xp, mels = op.get_conn_padded(states)
        xp, mels = np.asarray(xp), np.asarray(mels)
    except RuntimeError:
        # NotImplementedError: an operator without get_conn_flattened, a space
        # that cannot draw states; RuntimeError: a numba operator under
        # NetKet's sharding on several devices. Its fields describe it.
        return None
    h = hashlib.sha256()
    h.update(np.ascontiguousarray(states).tobytes())
    for row_xp, row_mels in zip(xp, mels):
        summed: dict[bytes, complex] = {}
        for conn, mel in zip(row_xp, row_mels):
            key = np.ascontiguousarray(conn).tobytes()
            summed[key] = summed.get(key, 0) + complex(mel)
        for key in sorted(summed):
            m = summed[key]
            if abs(m) > 1e-14:
                h.update(key)
                h.update(f"{m.real:.10g},{m.imag:.10g};".encode())
        h.update(b"|")
    return h.hexdigest()[:16]


# properties of operators that are derived, not what the operator is built from
# (and those that are other operators or the terms, listed as terms)
_DERIVED_PROPERTIES = {
    "H",
    "T",
    "hilbert",
    "dtype",
    "is_hermitian",
    "max_conn_size",
    "mel_cutoff",
    "n_operators",
    "size",
    "constant",
    "operators",
    "acting_on",
    "weights",
    "edges",
}


def readable(op) -> dict[str, str]:
    """``{"kind": "Ising", "h": "1.0", "J": "1.0", "edges": "8 edges ..."}``,
    ``{"kind": "LocalOperator", "term X0": "-1.0", "term Z0 Z1": "1.0", ...}``:
    the class (numba and jax versions alike), the numbers among its public
    properties, its graph's edges, and its terms (see :func:`_terms`)."""
    kind = re.sub(r"(Jax|Numba)$", "", type(op).__name__)
    labels = {KIND: kind}
    for name in dir(type(op)):
        if name.startswith("_") or name in _DERIVED_PROPERTIES:
            continue
        if not isinstance(getattr(type(op), name, None), property):
            continue
        try:
            value = getattr(op, name)
        except (AttributeError, NotImplementedError):  # a field it lacks, an abstract property
            continue
        if isinstance(value, (bool, int, float, complex, np.number)) or (
            isinstance(value, (np.ndarray, jax.Array)) and np.ndim(value) == 0
        ):
            labels[name] = number(complex(np.asarray(value)))
    edges = getattr(op, "edges", None)  # a NetKet Hamiltonian on a graph (Ising, BoseHubbard)
    if isinstance(edges, (np.ndarray, jax.Array)) and np.ndim(edges) == 2:
        listed = sorted(tuple(sorted(map(int, e))) for e in np.asarray(edges))
        shown = " ".join(f"{a}-{b}" for a, b in listed)
        labels["edges"] = shown if len(listed) <= 16 else f"{len(listed)} edges {sha(repr(listed).encode())}"
    try:
        terms = _terms(op)
    except (AttributeError, TypeError, ValueError):
        # LocalOperator's or PauliStrings' attribute names on another layout:
        # no terms to list, the numbers and the kind say what they can
        terms = {}
    labels.update({f"term {label}": text for label, text in terms.items()})
    return labels


def _terms(op) -> dict[str, str]:
    """The terms of a LocalOperator or PauliStrings: Pauli strings with
    their coefficients on spin-1/2 and qubit sites (``"X0": "-1.0"``,
    ``"Z0 Z1": "1.0"``: the same however the operator was written), else the
    nonzero matrix elements of the terms on each set of sites; none for an
    operator of more terms than ``_MAX_TERMS`` or Pauli strings than
    ``_TERM_BUDGET``."""
    if hasattr(op, "weights") and hasattr(op, "operators") and not hasattr(op, "acting_on"):  # PauliStrings
        strings = [str(s) for s in np.asarray(op.operators).ravel()]
        if len(strings) > _MAX_TERMS:
            return {}
        summed: dict[str, complex] = {}
        for string, weight in zip(strings, np.asarray(op.weights).ravel()):
            label = " ".join(f"{c}{i}" for i, c in enumerate(string) if c != "I") or "constant"
            summed[label] = summed.get(label, 0) + complex(weight)
        return _coefficient_texts(summed)
    # not converted to a LocalOperator (numba compiles for seconds): an Ising
    # is said by its h, J and edges
    if not hasattr(op, "acting_on") or not hasattr(op, "operators"):
        return {}
    acting_on = [tuple(int(s) for s in sites) for sites in op.acting_on]
    if len(acting_on) > _MAX_TERMS or sum(4 ** min(len(s), _MAX_TERM_SITES + 1) for s in acting_on) > _TERM_BUDGET:
        return {}
    matrices = [_dense_matrix(m) for m in op.operators]
    paulis = _pauli_matrices(op.hilbert)
    summed = {}
    constant = complex(np.asarray(op.constant))
    generic: dict[tuple, np.ndarray] = {}
    for sites, matrix in zip(acting_on, matrices):
        if paulis is not None and len(sites) <= _MAX_TERM_SITES:
            for letters, coefficient in _pauli_decomposition(matrix, paulis, len(sites)).items():
                label = " ".join(f"{c}{s}" for c, s in zip(letters, sites) if c != "I") or "constant"
                summed[label] = summed.get(label, 0) + coefficient
        else:
            generic[sites] = generic.get(sites, 0) + matrix
    if constant:
        summed["constant"] = summed.get("constant", 0) + constant
    labels = _coefficient_texts(summed)
    for sites, matrix in sorted(generic.items()):
        rows, cols = np.nonzero(np.abs(matrix) > 1e-12)
        if len(rows) <= 8:
            text = ", ".join(f"[{r},{c}] {number(matrix[r, c])}" for r, c in zip(rows, cols))
        else:
            text = f"{len(rows)} elements {sha(np.round(matrix, 10).tobytes())}"
        labels[f"on {list(sites)}"] = text
    return labels


def _coefficient_texts(summed: dict[str, complex]) -> dict[str, str]:
    """``{label: number}`` of the nonzero coefficients, by label."""
    return {label: number(c) for label, c in sorted(summed.items()) if abs(c) > 1e-12}


def _dense_matrix(matrix) -> np.ndarray:
    """A term's matrix (dense, sparse, or a sparse one in a 0-d object
    array) as a dense complex array."""
    if isinstance(matrix, np.ndarray) and matrix.dtype == object and matrix.shape == ():
        matrix = matrix.item()  # NetKet 3.23 keeps scipy sparse matrices in 0-d object arrays
    if hasattr(matrix, "toarray"):
        matrix = matrix.toarray()
    return np.asarray(matrix, dtype=complex)


def _pauli_matrices(hilbert) -> dict[str, np.ndarray] | None:
    """I, X, Y, Z in the basis of one site of ``hilbert`` (its order of local
    states: NetKet's Spin lists spin up, +1, first), or None unless every
    site is a spin 1/2 or a qubit."""
    if isinstance(hilbert, nk.hilbert.Spin) and hilbert.local_size == 2:
        up_first = float(np.asarray(hilbert.states_at_index(0))[0]) > 0
    elif isinstance(hilbert, nk.hilbert.Qubit):
        up_first = True  # |0>, the +1 eigenstate of Z, first
    else:
        return None
    z = np.diag([1.0, -1.0]) if up_first else np.diag([-1.0, 1.0])
    y = np.array([[0, -1j], [1j, 0]]) if up_first else np.array([[0, 1j], [-1j, 0]])
    return {
        "I": np.eye(2, dtype=complex),
        "X": np.array([[0, 1], [1, 0]], dtype=complex),
        "Y": y,
        "Z": z.astype(complex),
    }


def _pauli_decomposition(matrix: np.ndarray, paulis: dict[str, np.ndarray], n: int) -> dict[str, complex]:
    """``matrix`` (on ``n`` sites, the first the most significant) as a sum
    of Pauli strings: ``{"XZ": c, ...}``, c = tr(P M) / 2^n."""
    found = {}
    for letters in _pauli_strings(n):
        p = functools.reduce(np.kron, (paulis[c] for c in letters))
        c = np.trace(p.conj().T @ matrix) / 2**n
        if abs(c) > 1e-12:
            found[letters] = complex(c)
    return found


@functools.lru_cache(maxsize=None)
def _pauli_strings(n: int) -> tuple[str, ...]:
    """Every string of ``n`` letters of IXYZ, the last letter varying fastest."""
    return tuple("".join(s) for s in itertools.product("IXYZ", repeat=n))
