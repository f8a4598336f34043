"""The short check of an install, run by .ci/run under every supported
Python (3.11, 3.12, 3.13) and beside NetKet 3.21 with the JAX stack of its
time: save, load into a fresh template and continue, bit for bit against
the uninterrupted run, for the drivers users run most; and a Checkpoint
killed mid-run and rerun, where NetKet has the callback API it hooks into.
test_resume.py covers every driver; this is its cross-section."""

from __future__ import annotations

import netket as nk
import numpy as np
import pytest

import nkserde

from builders import crash_then_resume, params_bytes, run, tdvp, vmc, vmc_sr


def _vmc_sr_preconditioner():
    return vmc(preconditioner=nk.optimizer.SR(diag_shift=0.1))


# build, then what the first run() and the resumed run() are given
DRIVERS = {
    "vmc_adam": (vmc, 2, 2),
    "vmc_sr_preconditioner": (_vmc_sr_preconditioner, 2, 2),
    "vmc_sr": (vmc_sr, 2, 2),
    "tdvp_rk4": (tdvp, 0.02, 0.02),
}


@pytest.mark.parametrize("name", DRIVERS)
def test_save_load_continue_is_the_uninterrupted_run(name, tmp_path):
    build, first, then = DRIVERS[name]
    straight = build()
    want = np.concatenate([run(straight, first), run(straight, then)])

    interrupted = build()
    before = run(interrupted, first)
    nkserde.save(interrupted, tmp_path / "run.nks")
    resumed = nkserde.load(build(), tmp_path / "run.nks")
    assert resumed.step_count == interrupted.step_count
    got = np.concatenate([before, run(resumed, then)])

    assert got.tobytes() == want.tobytes()
    assert params_bytes(resumed) == params_bytes(straight)


def test_a_checkpointed_run_killed_and_rerun_ends_as_the_uninterrupted_one(tmp_path):
    if not hasattr(nk.callbacks, "AbstractCallback"):  # NetKet 3.21: the Checkpoint says what to use instead
        with pytest.raises(nkserde.errors.UnsupportedNetKetError, match="nkserde.save"):
            nkserde.Checkpoint(tmp_path / "ckpt")
        return
    straight = vmc()
    want = run(straight, 6)
    resumed, log, _ = crash_then_resume(vmc, tmp_path / "ckpt", 6, 4, make_out=nk.logging.RuntimeLog, every=2)
    assert resumed.step_count == 6
    # the logger's history of the steps before the crash is restored too
    assert np.asarray(log.data["Energy"]["Mean"]).tobytes() == want.tobytes()
    assert params_bytes(resumed) == params_bytes(straight)
