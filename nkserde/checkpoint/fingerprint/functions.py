"""Functions of one argument by what they compute: their values on fixed
inputs (the probe); and what every probe computed (an operator's action, a
function on its inputs, an optimizer's updates), kept in the result cache
(:mod:`nkserde.caches.results`) under :mod:`nkserde.caches.content_key`:
a resumed process takes them from there instead of computing them again.

Two probes: :data:`ACTIVATION` (a model's functions, on fixed real and
complex numbers) and :data:`SCHEDULE` (anything else, such as a
``diag_shift`` schedule: at fixed steps).

The probes of functions and optimizers compute on the host's CPU
(:func:`on_probe_device`), whatever device the run computes on: a GPU's or
a TPU's arithmetic differs from a CPU's in the last bits (a TPU emulates
float64; exp, log, tanh, division), and the same script must give the same
fingerprint on each. A process without a CPU backend (``JAX_PLATFORMS=tpu``
alone) probes on its accelerator, which may not compute a function on the
probe's numbers at all (a TPU: NetKet's ``log_cosh`` on float64 ones; the
function is then described by its name and what it closes over): its
fingerprint says where it probed, and another platform's is compared with
it by what both say in words (:mod:`.compare`). An operator's action is
computed where its arrays are (they may be committed to the run's device):
it gathers and adds matrix elements the script gave, which every platform
computes alike."""

from __future__ import annotations

import contextlib
import functools
import inspect
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from ... import jax_internals
from ...caches import content_key, results as result_cache
from .entries import VERSION, number

ACTIVATION = "activation"  # probe functions on real and complex inputs (a model's)
SCHEDULE = "schedule"  # probe functions at fixed steps (everything else)

# the probes' fixed inputs
PROBE_STEPS = np.array([0, 1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 100000], np.int32)
_SHOWN_STEPS = (0, 1, 10, 100, 1000, 10000)
_PROBE_REAL = np.array([-4.0, -2.5, -1.5, -0.5, 0.0, 0.25, 0.75, 1.0, 2.0, 3.5])
_PROBE_COMPLEX = np.array([0.3 + 0.1j, -1.2 + 0.4j, 2.0 - 0.7j, -0.1 - 2.5j, 1.5 + 1.0j])


def probe_device():
    """The device the probes compute on: the first CPU device of this
    process; None where JAX has no CPU backend (``JAX_PLATFORMS=tpu``
    alone): then the run's default device (the fingerprint says which:
    :data:`~nkserde.checkpoint.fingerprint.entries.PROBES_ON`)."""
    try:
        return jax.local_devices(backend="cpu")[0]
    except RuntimeError:  # JAX's "Unknown backend cpu"
        return None


def on_probe_device():
    """A context in which the probes compute on :func:`probe_device`: its
    default device, and where a mesh is set (NetKet sets one of every
    device, a TPU's included), a mesh of that device alone with the same
    axes (jitted code refuses arguments off the mesh it runs in)."""
    device = probe_device()
    context = contextlib.ExitStack()
    if device is None:
        return context
    context.enter_context(jax.default_device(device))
    mesh = jax_internals.concrete_mesh()
    if mesh is not None:
        names = mesh.axis_names
        one = jax.sharding.Mesh(np.array([device]).reshape((1,) * len(names)), names, axis_types=mesh.axis_types)
        context.enter_context(jax_internals.using_mesh(one))
    return context


def probe_platform() -> str:
    """The platform the probes compute on (``"cpu"`` but where
    :func:`probe_device` finds none)."""
    device = probe_device()
    return device.platform if device is not None else jax.default_backend()


def one_argument(f) -> bool:
    """Whether ``f``'s signature asks for exactly one positional argument."""
    try:
        if isinstance(f, functools.partial):  # NetKet's HashablePartial hides the bound signature
            f = functools.partial(f.func, *f.args, **f.keywords)
        signature = inspect.signature(f)
    except (TypeError, ValueError):
        return False
    kinds = inspect.Parameter
    required = [
        p
        for p in signature.parameters.values()
        if p.default is kinds.empty and p.kind not in (kinds.VAR_POSITIONAL, kinds.VAR_KEYWORD)
    ]
    return len(required) == 1 and required[0].kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)


def probe_function(f, probe: str) -> list[np.ndarray] | None:
    """``f`` on the fixed inputs (a schedule: the steps; an activation: real
    and complex numbers), or None when it is not a function of one number."""
    if probe == SCHEDULE and not one_argument(f):
        return None  # a model's functions are tried whatever their signature says (NetKet's reim wraps it away)
    inputs = [PROBE_STEPS] if probe == SCHEDULE else [_PROBE_REAL, _PROBE_COMPLEX]
    outputs = [out for out in (call(f, x) for x in inputs) if out is not None]
    return outputs or None


def call(f, x) -> np.ndarray | None:
    """``f`` on the probe ``x``, as complex numbers (None: not a function of
    numbers); kept in the result cache."""
    return memoized("call", (f, x), lambda: computed_call(f, x), encode_numbers, decode_numbers)


def computed_call(f, x) -> np.ndarray | None:
    """:func:`call`, computed: ``f`` on the whole array ``x``, else on each
    of its numbers."""
    with warnings.catch_warnings(), on_probe_device():
        warnings.simplefilter("ignore")
        # f is any function a model or setting holds, the script's own included,
        # called on numbers it may not take: NetKet's own such functions raise
        # TypeError and AttributeError here, a script's may raise anything
        try:
            return _complex_numbers(f(jnp.asarray(x)), len(x))
        except Exception:  # noqa: BLE001  (arbitrary code on an array: try it on each number)
            pass
        try:
            return np.concatenate([_complex_numbers(f(v), 1) for v in x.tolist()])
        except Exception:  # noqa: BLE001  (arbitrary code on numbers: it is not a function of numbers)
            return None


def _complex_numbers(out, n: int) -> np.ndarray:
    """``out`` as 1-d complex numbers, one or ``n`` of them (TypeError:
    it is not numbers)."""
    a = np.asarray(out)
    if a.dtype == object or a.size not in (1, n) or not np.issubdtype(a.dtype, np.number):
        raise TypeError("not numbers")
    return np.ravel(a).astype(complex)


def values_text(values: np.ndarray) -> str:
    """``"0: 0.01, 1: 0.00991, 10: 0.0091, ..."``: a schedule at some of the
    probe's steps (a function of all of them, a norm: its values)."""
    if len(values) != len(PROBE_STEPS):
        return ", ".join(number(v, 6) for v in values[: len(_SHOWN_STEPS)])
    shown = {int(s): v for s, v in zip(PROBE_STEPS, values)}
    return ", ".join(f"{s}: {number(shown[s], 6)}" for s in _SHOWN_STEPS)


# ------------------------------------------------------------ the probes' results


def memoized(kind: str, parts: tuple, compute, encode, decode):
    """``compute()``, or what it returned in an earlier process for the same
    ``parts`` (:func:`nkserde.caches.results.memoized`, keyed by
    :func:`nkserde.caches.content_key.key`: nothing is kept where a
    part cannot be described by its content, or without a cache)."""
    platform = probe_platform()
    kept_as = f"fingerprint {VERSION} {kind}" + (f" on {platform}" if platform != "cpu" else "")
    key = content_key.key(kept_as, *parts) if result_cache.directory() is not None else None
    return result_cache.memoized(key, compute, encode, decode)


def not_a_stored_result():
    """Raises what a decoder raises for a kept value it does not recognise."""
    raise ValueError("not a stored result")


def encode_numbers(a: np.ndarray | None):
    """Complex numbers (1-d) as JSON: ``[real parts, imaginary parts]``."""
    return None if a is None else [a.real.tolist(), a.imag.tolist()]


def decode_numbers(stored) -> np.ndarray | None:
    """The inverse of :func:`encode_numbers` (ValueError: not its output)."""
    if stored is None:
        return None
    real, imag = (np.asarray(part, dtype=float) for part in stored)
    if real.ndim != 1 or real.shape != imag.shape:
        not_a_stored_result()
    out = np.empty(real.shape, complex)
    out.real, out.imag = real, imag
    return out
