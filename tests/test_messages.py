"""The mistakes a newcomer makes first, and what nkserde answers: each
message says what it found, what it expected and what to do, in words
these tests assert; where it suggests a call, the call works. One file is
described the same way by ``load``, ``verify`` and ``info``."""

from __future__ import annotations

import pickle
import re
from pathlib import Path

import netket as nk
import numpy as np
import pytest

import builders
import nkserde
from nkserde.errors import CorruptFileError, TemplateMismatchError

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("messages")
    driver = builders.vmc()
    builders.run(driver, 2)
    nkserde.save(driver, root / "driver.nks")
    nkserde.save(driver.state, root / "state.nks")
    return root, driver


def _raised(error, call) -> str:
    with pytest.raises(error) as raised:
        call()
    return str(raised.value)


def test_a_driver_file_into_a_state_template_says_at_state(files):
    root, driver = files
    message = _raised(TemplateMismatchError, lambda: nkserde.load(builders.mc_state(), root / "driver.nks"))
    assert "file has netket.driver.VMC, template has netket.vqs.MCState" in message
    assert (
        'the file holds a netket.vqs.MCState at "state": load that part with '
        f'nkserde.load(template, "{root / "driver.nks"}", at="state")' in message
    )
    vs = nkserde.load(builders.mc_state(), root / "driver.nks", at="state")  # what it says works
    builders.assert_same_leaves(builders.leaves(vs.parameters), builders.leaves(driver.state.parameters))


def test_a_driver_file_into_a_parameter_dict_says_where_the_parameters_are(files):
    root, driver = files
    template = builders.mc_state().parameters
    message = _raised(TemplateMismatchError, lambda: nkserde.load(template, root / "driver.nks"))
    assert "template has dict with keys ['Dense', 'visible_bias']" in message
    assert 'the file holds a dict like the template at "state/parameters"' in message
    assert 'at="state/parameters")' in message
    params = nkserde.load(template, root / "driver.nks", at="state/parameters")
    builders.assert_same_leaves(builders.leaves(params), builders.leaves(driver.state.parameters))


def test_a_driver_file_into_a_full_sum_state_says_at_state_and_strict_false(files):
    root, driver = files
    message = _raised(TemplateMismatchError, lambda: nkserde.load(builders.full_sum_state(), root / "driver.nks"))
    assert "file has netket.driver.VMC, template has netket.vqs.FullSumState" in message
    assert "strict=False loads its shared fields into a netket.vqs.FullSumState" in message
    assert message.endswith('at="state", strict=False)')
    with pytest.warns(nkserde.PartialLoadWarning):
        exact = nkserde.load(builders.full_sum_state(), root / "driver.nks", at="state", strict=False)
    builders.assert_same_leaves(builders.leaves(exact.parameters), builders.leaves(driver.state.parameters))


def test_a_state_file_into_a_driver_template_says_to_load_it_into_a_state(files):
    root, _ = files
    message = _raised(TemplateMismatchError, lambda: nkserde.load(builders.vmc(), root / "state.nks"))
    assert "file has netket.vqs.MCState, template has netket.driver.VMC" in message
    assert (
        "the template's netket.driver.VMC holds a netket.vqs.MCState at \"state\": load the file into a "
        "netket.vqs.MCState template (the one you build the netket.driver.VMC with)"
    ) in message


def test_a_file_of_another_type_altogether_names_the_type_to_build(files):
    root, _ = files
    message = _raised(TemplateMismatchError, lambda: nkserde.load({"energy": 0.0}, root / "driver.nks"))
    assert message.endswith("load it into a template of type netket.driver.VMC, built as the saved object was")


def test_a_shape_mismatch_says_build_it_the_same_way_or_strict_false(files):
    root, _ = files
    wider = builders.mc_state(model=nk.models.RBM(alpha=2, param_dtype=float))
    message = _raised(TemplateMismatchError, lambda: nkserde.load(wider, root / "state.nks"))
    assert re.search(r"parameters/Dense/(bias|kernel): file has array float64\[8(, 8)?\], template has array", message)
    assert "build the template as the saved object was built (the same model, sampler and sizes)" in message
    assert "or load what matches with strict=False" in message
    _, report = nkserde.load(wider, root / "state.nks", strict=False, report=True)
    assert sorted(report.differs) == ["parameters/Dense/bias", "parameters/Dense/kernel"]


def _one_story(path) -> str:
    """The message of load, verify and info on ``path``: one and the same."""
    messages = {
        _raised(CorruptFileError, lambda: nkserde.load(builders.mc_state(), path)),
        _raised(CorruptFileError, lambda: nkserde.verify(path)),
        _raised(CorruptFileError, lambda: nkserde.info(path)),
    }
    assert len(messages) == 1, messages
    return messages.pop()


READS = "nkserde reads the files nkserde.save and nkserde.Checkpoint write (they start with b'\\x89NKSERD\\n')"


def test_a_text_file_is_text_not_a_truncated_file(tmp_path):
    path = tmp_path / "energy.txt"
    path.write_text("hello\n")  # 6 bytes
    message = _one_story(path)
    assert message == (
        f"{path}: not an nkserde file: text ('hello'); {READS} and, with nkserde.load, NetKet's .mpack and "
        "nqxpack files"
    )
    assert "too short" not in message and "truncated" not in message


def test_an_npz_is_a_zip_that_is_not_netket_s_in_every_reader(tmp_path):
    path = tmp_path / "arrays.npz"
    np.savez(path, x=np.ones(3))
    message = _one_story(path)
    assert message.startswith(
        f"{path}: not an nkserde file: a zip archive without NetKet's metadata.json, so not an nqxpack file "
        "(numpy's .npz is one); "
    )
    assert READS in message


@pytest.mark.parametrize(
    "content, what",
    [
        (b"", "an empty file (0 bytes)"),
        (b"\x93NUMPY\x01\x00", "a numpy .npy file"),
        (b"\x89HDF\r\n\x1a\n" + bytes(64), "an HDF5 file (NetKet's HDF5Log writes them)"),
        (pickle.dumps({"a": 1}), "a Python pickle"),
        (bytes(range(1, 60)), "a file that starts with the bytes b'\\x01\\x02\\x03\\x04\\x05\\x06\\x07\\x08'"),
    ],
    ids=["empty", "npy", "hdf5", "pickle", "binary"],
)
def test_other_files_are_named_for_what_they_are(tmp_path, content, what):
    path = tmp_path / "file"
    path.write_bytes(content)
    assert (
        _one_story(path)
        == f"{path}: not an nkserde file: {what}; {READS} and, with nkserde.load, NetKet's .mpack and nqxpack files"
    )


def test_the_start_of_an_nkserde_file_is_truncated(files, tmp_path):
    root, _ = files
    path = tmp_path / "cut.nks"
    path.write_bytes((root / "state.nks").read_bytes()[:20])
    message = _raised(CorruptFileError, lambda: nkserde.verify(path))
    assert message == (
        f"{path}: truncated: 20 bytes, the start of an nkserde file, which has at least 48 (a save never leaves "
        "one: a copy cut short?); copy it again, or load an older checkpoint"
    )


def test_an_nkserde_file_whose_first_bytes_are_damaged(files, tmp_path):
    root, _ = files
    data = bytearray((root / "state.nks").read_bytes())
    data[:8] = b"NOTMAGIC"
    path = tmp_path / "damaged.nks"
    path.write_bytes(bytes(data))
    message = _raised(CorruptFileError, lambda: nkserde.verify(path))
    assert (
        "bad magic bytes b'NOTMAGIC' where an nkserde file starts with b'\\x89NKSERD\\n', though it ends as one"
        in message
    )
    assert message.endswith("the start of the file is damaged; copy it again, or load an older checkpoint")


def test_a_netket_file_given_to_verify_says_load_reads_it():
    path = FIXTURES / "netket-files-3.23.0" / "mcstate.mpack"
    message = _raised(CorruptFileError, lambda: nkserde.verify(path))
    assert message == (
        f"{path}: a file NetKet wrote (flax msgpack, an .mpack), not an nkserde file: it has no checksums or "
        "schema versions; nkserde.load(template, path) reads it into an MCState, a FullSumState or a variables "
        "dict, and nkserde inspect shows what it holds"
    )
    assert nkserde.load(builders.mc_state(), path) is not None  # as it says
