"""nkserde's warnings are shown at the user's line, as Python's own are:
the line of the script that called ``nkserde.load`` or ``driver.run``
(a Checkpoint's warnings come from inside NetKet's loop), never a line of
nkserde or NetKet, however deep inside the warning was raised."""

from __future__ import annotations

import shutil
import sys
import warnings

import netket as nk
import pytest

import builders
import nkserde


def _line() -> int:
    """The caller's line number."""
    return sys._getframe(1).f_lineno


def _shown(record, text):
    """(file, line) of the one warning whose message holds ``text``."""
    (w,) = [w for w in record if text in str(w.message)]
    return w.filename, w.lineno


def _damage(path):
    data = bytearray(path.read_bytes())
    data[70] ^= 0xFF  # in the array payload: the header reads, a checksum fails
    path.write_bytes(bytes(data))


@pytest.fixture(scope="module")
def run_directory(tmp_path_factory):
    """A Checkpoint directory of steps 1 and 2, the newest damaged."""
    directory = tmp_path_factory.mktemp("warnings") / "ckpt"
    builders.vmc().run(2, show_progress=False, callback=nkserde.Checkpoint(directory, every=1, async_save=False))
    _damage(directory / "step-0000000002.nks")
    return directory


def test_a_damaged_checkpoint_skipped_by_load_is_shown_at_the_load(run_directory):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        line = _line() + 1
        nkserde.load(builders.vmc(), run_directory)
    assert _shown(record, "skipping checkpoint") == (__file__, line)


def test_a_damaged_checkpoint_skipped_by_a_resume_is_shown_at_the_run(run_directory, tmp_path):
    directory = tmp_path / "ckpt"
    shutil.copytree(run_directory, directory)
    driver = builders.vmc()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        line = _line() + 1
        driver.run(3, show_progress=False, callback=nkserde.Checkpoint(directory, every=1, async_save=False))
    assert _shown(record, "skipping checkpoint") == (__file__, line)


def test_a_logger_that_cannot_be_checkpointed_is_shown_at_the_run(tmp_path):
    class Unregistered(nk.logging.AbstractLog):  # a logger of the user's, not registered
        def __call__(self, step, item, variational_state=None):
            pass

        def flush(self, variational_state=None):
            pass

    driver = builders.vmc()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        line = _line() + 1
        driver.run(1, out=Unregistered(), show_progress=False, callback=nkserde.Checkpoint(tmp_path, async_save=False))
    assert _shown(record, "Unregistered is not checkpointed") == (__file__, line)


def test_fewer_chains_than_saved_is_shown_at_the_load(tmp_path):
    _, hilbert, _ = builders.system()

    def state(n):
        return builders.mc_state(sampler=nk.sampler.MetropolisLocal(hilbert, n_chains=n), n_samples=8 * n)

    nkserde.save(state(12), tmp_path / "vs.nks")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        line = _line() + 1
        nkserde.load(state(8), tmp_path / "vs.nks")
    assert _shown(record, "12 chains, the template 8") == (__file__, line)
