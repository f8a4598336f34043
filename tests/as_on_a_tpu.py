"""Runs a script on this machine's CPU as it runs on a TPU chip under
``JAX_PLATFORMS=tpu``, as far as nkserde's fingerprint probes can tell:

    python tests/as_on_a_tpu.py [--cpu-backend] SCRIPT [ARGS...]

What differs on the chip, for the probes (nkserde/checkpoint/fingerprint/
functions.py), and what stands for it here:

- No CPU backend: ``jax.local_devices(backend="cpu")`` and
  ``jax.devices("cpu")`` raise JAX's RuntimeError "Unknown backend cpu";
  ``jax.default_backend()`` is ``"tpu"``. The probes then compute on the
  default device, the fingerprint says ``probes_on: tpu``, a checkpoint's
  metadata says it was written on tpu and a resume says where it continues.
- The chip's XLA emulates 64-bit integers with pairs of 32-bit words and
  fails to compile a 64-bit ``shift_right_arithmetic`` ("Binary op
  shift-right-arithmetic with different element types: s32[..] and
  u32[..]", seen there in NetKet's initialisation of a float64 RBM:
  docs/guides/accelerators.md). ``jnp.signbit`` of a float64 is such a shift, and
  NetKet's ``log_cosh`` (the RBM's activation) takes the sign of its input:
  on the probes' float64 and complex128 numbers it raises there, on a
  float32 run's numbers it computes. Here the CPU's lowering of that one
  primitive raises the same JaxRuntimeError for 64-bit operands (and lowers
  32-bit ones through logical shifts, which give the same numbers).

With ``--cpu-backend``, the chip's machine with ``JAX_PLATFORMS`` unset
(JAX's default): ``jax.default_backend()`` is ``"tpu"``, the CPU backend
is there and the probes compute on it, as on the chip's host.

Everything else computes as on the CPU: the chip's arithmetic differs from
the CPU's in the last bits, and the fingerprints of two platforms compare
no hashes of probes, so that difference changes nothing the tests see.
On the chip, tests/accelerator_suite.py compares the fingerprint this
module gives with the chip's own."""

from __future__ import annotations

import runpy
import sys

import jax
import numpy as np
from jax import lax
from jax.interpreters import mlir

PLATFORM = "tpu"
_CHIP_ERROR = "INVALID_ARGUMENT: Binary op shift-right-arithmetic with different element types: s32[{0}] and u32[{0}]"


def _unknown_cpu_backend():
    return RuntimeError(f"Unknown backend cpu. Available backends are ['{PLATFORM}']")  # JAX's words


def _devices_without_cpu(devices):
    def devices_of(backend=None):
        if backend == "cpu":
            raise _unknown_cpu_backend()
        return devices(backend)

    return devices_of


def _local_devices_without_cpu(local_devices):
    def local_devices_of(process_index=None, backend=None, host_id=None):
        if backend == "cpu":
            raise _unknown_cpu_backend()
        return local_devices(process_index, backend, host_id)

    return local_devices_of


def _shift_right_arithmetic_32(x, y):
    """An arithmetic right shift made of logical ones (no recursion into
    the primitive this module lowers)."""
    shifted = lax.shift_right_logical(x, y)
    return lax.select(x >= 0, shifted, lax.bitwise_not(lax.shift_right_logical(lax.bitwise_not(x), y)))


def _chip_lowering(ctx, x, y):
    (aval, _) = ctx.avals_in
    if np.dtype(aval.dtype).itemsize == 8:
        raise jax.errors.JaxRuntimeError(_CHIP_ERROR.format(",".join(map(str, aval.shape))))
    return mlir.lower_fun(_shift_right_arithmetic_32, multiple_results=False)(ctx, x, y)


def install(cpu_backend: bool = False) -> None:
    """Makes this process's JAX look like the chip's to the probes (with
    ``cpu_backend``: like the chip's machine's with its CPU backend)."""
    jax.config.update("jax_platforms", "cpu")  # the CPU computes; the names below say tpu
    jax.default_backend = lambda: PLATFORM
    if not cpu_backend:
        jax.local_devices = _local_devices_without_cpu(jax.local_devices)
        jax.devices = _devices_without_cpu(jax.devices)
        mlir.register_lowering(lax.shift_right_arithmetic_p, _chip_lowering, platform="cpu")


if __name__ == "__main__":
    with_cpu = sys.argv[1] == "--cpu-backend"
    install(cpu_backend=with_cpu)
    sys.argv = sys.argv[2:] if with_cpu else sys.argv[1:]
    runpy.run_path(sys.argv[0], run_name="__main__")
