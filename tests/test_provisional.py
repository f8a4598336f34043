"""State a library builds provisionally and completes at the first step
(``Registration.provisional``, docs/schema.md "Provisional state"): a
freshly built template takes the file, a real mismatch is still refused
with the message of any other mismatch.

First the rule on a type of this test, then the two cases of issue 30 in
a VMC driver built as a script builds it: optax's ``monitor`` (an empty
dict that the first update fills) and a numpy sampler with a complex model
(a complex ``log_prob`` that the first reset makes real). Their
kill-and-rerun is in tests/test_checkpoint_kill.py; the enumeration of
every such state of optax and NetKet in tests/test_first_steps.py.
"""

from __future__ import annotations

import dataclasses
import re
import warnings
from typing import Any

import jax
import netket as nk
import numpy as np
import optax
import pytest

import nkserde
import nkserde.saving.snapshot
import builders
from builders import assert_identical, assert_same_leaves, leaves, params_bytes
from nkserde.types import registry
from nkserde.errors import TemplateMismatchError
from nkserde.format.reader import LazyArray
from nkserde.types.placement import PerProcess, Resizable

# --------------------------------------------------------------------------- the rule


@dataclasses.dataclass
class Monitor:
    """Built empty; each step fills ``measurements`` and makes ``log_prob``
    real (as optax.monitor and a numpy sampler do)."""

    measurements: dict
    log_prob: np.ndarray
    steps: int = 0

    @classmethod
    def fresh(cls):
        return cls({}, np.zeros(3, complex))

    def step(self):
        norm = np.float64(np.abs(self.log_prob).sum() + self.steps + 1)
        return Monitor({"norm": norm}, np.asarray(self.log_prob.real + 1.0), self.steps + 1)


@pytest.fixture
def monitor_registered():
    """Registers Monitor with its provisional fields; yields the calls of
    their next_step functions."""
    saved = registry.snapshot()
    calls = []

    def next_step(field):
        def step(template, value):
            calls.append(field)
            return getattr(dataclasses.replace(template, **{field: value}).step(), field)

        return step

    nkserde.register(
        Monitor,
        name="tests.provisional.Monitor",
        to_state=lambda m: {"measurements": m.measurements, "log_prob": m.log_prob, "steps": m.steps},
        from_state=lambda t, f: dataclasses.replace(t, **f),
        fields=("measurements", "log_prob", "steps"),
        provisional={"measurements": next_step("measurements"), "log_prob": next_step("log_prob")},
    )
    yield calls
    registry.restore(saved)


@pytest.fixture
def registry_restored():
    """The registry put back as it was after a test that registers types."""
    saved = registry.snapshot()
    yield
    registry.restore(saved)


def test_a_stepped_state_loads_into_a_fresh_template(monitor_registered, tmp_path):
    stepped = Monitor.fresh().step().step()
    nkserde.save(stepped, tmp_path / "m.nks")
    for loaded in (
        nkserde.load(Monitor.fresh(), tmp_path / "m.nks"),
        nkserde.from_state_dict(Monitor.fresh(), nkserde.state_dict(stepped)),
    ):
        assert loaded.measurements.keys() == {"norm"}
        assert loaded.measurements["norm"].tobytes() == stepped.measurements["norm"].tobytes()
        assert loaded.log_prob.dtype == np.float64 and loaded.log_prob.tobytes() == stepped.log_prob.tobytes()
        assert loaded.steps == 2
    assert set(monitor_registered) == {"measurements", "log_prob"}


def test_the_template_is_not_stepped_when_the_file_fits_it(monitor_registered, tmp_path):
    nkserde.save(Monitor({}, np.arange(3) * 1j), tmp_path / "m.nks")
    loaded = nkserde.load(Monitor.fresh(), tmp_path / "m.nks")
    assert loaded.log_prob.tolist() == [0, 1j, 2j]
    assert monitor_registered == []


def test_without_the_declaration_the_fresh_template_refuses(tmp_path):
    saved = registry.snapshot()
    try:
        nkserde.register(
            Monitor,
            name="tests.provisional.Monitor",
            to_state=lambda m: {"measurements": m.measurements, "log_prob": m.log_prob, "steps": m.steps},
            from_state=lambda t, f: dataclasses.replace(t, **f),
        )
        nkserde.save(Monitor.fresh().step(), tmp_path / "m.nks")
        with pytest.raises(TemplateMismatchError, match="measurements: file has dict with keys"):
            nkserde.load(Monitor.fresh(), tmp_path / "m.nks")
    finally:
        registry.restore(saved)


def test_what_no_step_gives_is_refused_with_the_usual_message(monitor_registered, tmp_path):
    """Other measurements, or a log_prob of a dtype neither the template nor
    its step has: the message names the file, the path and the template's
    own value, as for any mismatch."""
    other = Monitor.fresh().step()
    other.measurements = {"other": np.float64(1.0)}
    nkserde.save(other, tmp_path / "keys.nks")
    expected = (
        f"{tmp_path / 'keys.nks'}: measurements: file has dict with keys ['other'], template has dict "
        "with keys [] (not in template: ['other'])"
    )
    with pytest.raises(TemplateMismatchError, match=re.escape(expected)):
        nkserde.load(Monitor.fresh(), tmp_path / "keys.nks")

    single = Monitor.fresh().step()
    single.log_prob = single.log_prob.astype(np.float32)
    nkserde.save(single, tmp_path / "dtype.nks")
    with pytest.raises(
        TemplateMismatchError, match=r"log_prob: file has array float32\[3\], template has array complex128\[3\]"
    ):
        nkserde.load(Monitor.fresh(), tmp_path / "dtype.nks")


def test_a_step_that_fails_leaves_the_template_to_decide(tmp_path):
    saved = registry.snapshot()
    try:

        def broken(template, value):
            raise RuntimeError("this template cannot step")

        nkserde.register(
            Monitor,
            name="tests.provisional.Monitor",
            to_state=lambda m: {"measurements": m.measurements, "log_prob": m.log_prob, "steps": m.steps},
            from_state=lambda t, f: dataclasses.replace(t, **f),
            provisional={"measurements": broken},
        )
        nkserde.save(Monitor.fresh().step(), tmp_path / "m.nks")
        with pytest.raises(TemplateMismatchError, match="measurements: file has dict with keys"):
            nkserde.load(Monitor.fresh(), tmp_path / "m.nks")
    finally:
        registry.restore(saved)


def test_a_lenient_load_takes_the_stepped_structure(monitor_registered, tmp_path):
    nkserde.save(Monitor.fresh().step(), tmp_path / "m.nks")
    loaded, report = nkserde.load(Monitor.fresh(), tmp_path / "m.nks", strict=False, report=True)
    assert loaded.measurements.keys() == {"norm"} and loaded.log_prob.dtype == np.float64
    assert not report.entries, report


def test_the_load_never_stores_the_template_again_to_compare(monitor_registered, tmp_path, monkeypatch):
    """Whether the file fits a provisional field is told by loading it:
    nothing of the template (or of its steps) goes through the save walk."""
    nkserde.save(Monitor.fresh().step().step(), tmp_path / "m.nks")

    def refuse(*args, **kwargs):
        raise AssertionError("the load stored a value of the template")

    monkeypatch.setattr(nkserde.saving.snapshot, "to_state_dict", refuse)
    loaded = nkserde.load(Monitor.fresh(), tmp_path / "m.nks")
    assert loaded.measurements.keys() == {"norm"} and loaded.steps == 2


def test_each_array_of_a_stepped_file_is_read_once(monitor_registered, tmp_path, monkeypatch):
    """The checks that find the step read nothing: each stored array is
    read once, by the load (a resumed optimizer state of a large model is
    not read twice)."""
    nkserde.save(Monitor.fresh().step().step(), tmp_path / "m.nks")
    reads, read = [], LazyArray.read

    def counted(self, *args, **kwargs):
        reads.append(self.shape)
        return read(self, *args, **kwargs)

    monkeypatch.setattr(LazyArray, "read", counted)
    loaded = nkserde.load(Monitor.fresh(), tmp_path / "m.nks")
    assert loaded.log_prob.dtype == np.float64 and monitor_registered  # the file took the steps
    assert sorted(reads) == [(), (3,)]  # measurements/norm, log_prob


def test_the_steps_end_where_the_structure_stops_changing(monitor_registered, tmp_path):
    """Other measurements: the first step fills the template's, the second
    changes nothing JAX sees, and no third step is taken."""
    other = Monitor.fresh().step()
    other.measurements = {"other": np.float64(1.0)}
    nkserde.save(other, tmp_path / "m.nks")
    with pytest.raises(TemplateMismatchError, match="measurements: file has dict with keys"):
        nkserde.load(Monitor.fresh(), tmp_path / "m.nks")
    assert monitor_registered == ["measurements", "measurements"]


@dataclasses.dataclass
class Counter:
    """``nu`` is a Python float until the first step makes it an array (as
    optax 0.2.2's novograd does)."""

    nu: Any


def test_a_python_number_is_not_taken_for_the_array_a_step_makes(registry_restored, tmp_path):
    """The check converts nothing: the file's 0-d array does not fit the
    template's float (a plain load would take it as one), the step's array
    does, and the loaded value is an array as in the run."""
    nkserde.register(
        Counter,
        name="tests.provisional.Counter",
        to_state=lambda c: {"nu": c.nu},
        from_state=lambda t, f: Counter(f["nu"]),
        fields=("nu",),
        provisional={"nu": lambda template, value: np.asarray(value, dtype=np.float32)},
    )
    nkserde.save(Counter(np.asarray(2.5, dtype=np.float32)), tmp_path / "c.nks")
    loaded = nkserde.load(Counter(0.0), tmp_path / "c.nks")
    assert isinstance(loaded.nu, np.ndarray) and loaded.nu.dtype == np.float32 and loaded.nu == 2.5


@dataclasses.dataclass
class Chains:
    """A sampler state: ``log_prob`` complex until the first reset, one row
    per chain (resized on load, with a warning)."""

    chains: np.ndarray
    log_prob: np.ndarray


@dataclasses.dataclass
class Sampled:
    """What holds a provisional :class:`Chains` (an MCState)."""

    state: Chains


def test_a_provisional_state_of_other_chains_loads_with_one_warning(registry_restored, tmp_path):
    """The file has 4 chains and a real log_prob, the template 2 chains and
    a complex one: the reset's value takes the file, resized, and the
    resize is announced once (the checks before the load warn nothing)."""
    nkserde.register(
        Chains,
        name="tests.provisional.Chains",
        to_state=lambda c: {"chains": Resizable(c.chains), "log_prob": Resizable(c.log_prob, announce=False)},
        from_state=lambda t, f: Chains(f["chains"], f["log_prob"]),
        fields=("chains", "log_prob"),
    )
    nkserde.register(
        Sampled,
        name="tests.provisional.Sampled",
        to_state=lambda s: {"state": s.state},
        from_state=lambda t, f: Sampled(f["state"]),
        fields=("state",),
        provisional={"state": lambda template, value: Chains(value.chains, value.log_prob.real.copy())},
    )
    nkserde.save(Sampled(Chains(np.arange(4.0), np.arange(4.0) + 10)), tmp_path / "s.nks")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        loaded = nkserde.load(Sampled(Chains(np.zeros(2), np.zeros(2, complex))), tmp_path / "s.nks")
    assert loaded.state.chains.tolist() == [0.0, 1.0] and loaded.state.log_prob.tolist() == [10.0, 11.0]
    assert loaded.state.log_prob.dtype == np.float64
    assert [str(w.message) for w in caught] == [
        "nkserde: state/chains: the file has 4 chains, the template 2: the load keeps the first 2"
    ]


def test_provisional_fields_must_be_declared_fields():
    saved = registry.snapshot()
    try:
        with pytest.raises(ValueError, match=r"provisional fields \['nope'\]"):
            nkserde.register(
                Monitor,
                name="tests.provisional.Monitor",
                to_state=lambda m: {"steps": m.steps},
                from_state=lambda t, f: t,
                fields=("steps",),
                provisional={"nope": lambda t, v: v},
            )
    finally:
        registry.restore(saved)


# --------------------------------------------------------------------------- issue 30 in a VMC driver


vmc_monitor, vmc_numpy_complex = builders.vmc_monitor, builders.vmc_numpy_complex
CASES = {"monitor": vmc_monitor, "numpy_complex": vmc_numpy_complex}


@pytest.fixture(scope="module")
def straight():
    """Each case run 4 steps without interruption."""
    out = {}
    for name, build in CASES.items():
        driver = build()
        builders.run(driver, 4)
        out[name] = driver
    return out


@pytest.mark.parametrize("name", sorted(CASES))
def test_resumes_bit_for_bit_from_a_fresh_template(name, straight, tmp_path):
    build = CASES[name]
    first = build()
    builders.run(first, 2)
    nkserde.save(first, tmp_path / "vmc.nks")
    fresh = build()
    before = leaves(fresh)
    resumed = nkserde.load(fresh, tmp_path / "vmc.nks")
    assert_same_leaves(before, leaves(fresh))  # the template is not changed by its step
    assert_identical(resumed, first)
    builders.run(resumed, 2)
    assert params_bytes(resumed) == params_bytes(straight[name])
    assert_identical(resumed, straight[name])


def test_the_cases_are_provisional():
    """What the fresh templates hold: without the rule neither loads."""
    fresh = vmc_monitor()._optimizer_state
    assert fresh[1].measurements == {}
    assert vmc_numpy_complex().state.sampler_state.log_prob.dtype == np.complex128


def test_another_optimizer_is_refused(tmp_path):
    first = vmc_monitor()
    builders.run(first, 1)
    nkserde.save(first, tmp_path / "vmc.nks")
    _, _, H = builders.system()
    other = nk.driver.VMC(
        H,
        optax.chain(optax.sgd(1e-2, momentum=0.9), optax.clip_by_global_norm(1.0)),
        variational_state=builders.mc_state(),
    )
    with pytest.raises(
        TemplateMismatchError, match=r"optimizer_state: file has list of length 3, template has tuple of length 2"
    ):
        nkserde.load(other, tmp_path / "vmc.nks")


def test_other_measurements_are_refused_with_the_message_of_today(tmp_path):
    first = vmc_monitor()
    builders.run(first, 1)
    nkserde.save(first, tmp_path / "vmc.nks")
    _, _, H = builders.system()
    renamed = optax.chain(
        optax.sgd(1e-2, momentum=0.9), optax.monitor({"norm": optax.tree.norm}), optax.clip_by_global_norm(1.0)
    )
    template = nk.driver.VMC(H, renamed, variational_state=builders.mc_state())
    expected = (
        "optimizer_state/1/measurements: file has dict with keys ['norm_before_clip', 'norm_before_clip_ema'], "
        "template has dict with keys []"
    )
    with pytest.raises(TemplateMismatchError, match=re.escape(expected)):
        nkserde.load(template, tmp_path / "vmc.nks")


def test_a_different_model_is_refused(tmp_path):
    """A real model's numpy sampler state is not provisional (its log_prob
    is float64 from the start); a complex model's file does not load into
    it, nor the other way round."""
    for saved, template, message in (
        (complex, float, r"state/parameters/.*: file has array complex128\[.*\], template has array float64"),
        (float, complex, r"state/parameters/.*: file has array float64\[.*\], template has array complex128"),
    ):
        first = vmc_numpy_complex(param_dtype=saved)
        builders.run(first, 1)
        nkserde.save(first, tmp_path / "vmc.nks")
        with pytest.raises(TemplateMismatchError, match=message):
            nkserde.load(vmc_numpy_complex(param_dtype=template), tmp_path / "vmc.nks")


def test_a_log_prob_no_reset_gives_is_refused(tmp_path):
    first = vmc_numpy_complex()
    builders.run(first, 1)
    state = nkserde.state_dict(first)
    sampler_state = state["state"]["sampler_state"]
    sampler_state["log_prob"] = PerProcess(sampler_state["log_prob"].value.astype(np.float32))
    with pytest.raises(
        TemplateMismatchError,
        match=re.escape("state/sampler_state/log_prob: file has array float32[16], template has array complex128[16]"),
    ):
        nkserde.from_state_dict(vmc_numpy_complex(), state)


def test_a_sampler_state_alone_is_not_provisional(tmp_path):
    """Without its variational state there is no model to reset it with:
    a sampler state loaded on its own needs a template past its first reset."""
    first = vmc_numpy_complex()
    builders.run(first, 1)
    nkserde.save(first.state.sampler_state, tmp_path / "sampler.nks")
    with pytest.raises(
        TemplateMismatchError, match=r"log_prob: file has array float64\[16\], template has array complex128"
    ):
        nkserde.load(vmc_numpy_complex().state.sampler_state, tmp_path / "sampler.nks")
    sampled = vmc_numpy_complex().state
    sampled.sample()
    loaded = nkserde.load(sampled.sampler_state, tmp_path / "sampler.nks")
    assert_identical(loaded, first.state.sampler_state)


def test_the_numpy_samplers_of_the_issue(tmp_path):
    """MetropolisLocalNumpy chunked, MetropolisHamiltonianNumpy and a
    MetropolisCustom rule, with a complex model, through an MCState."""
    _, hilbert, H = builders.system()
    moves = sum(nk.operator.spin.sigmax(hilbert, i) for i in range(builders.N))
    samplers = {
        "chunked": lambda: nk.sampler.MetropolisLocalNumpy(hilbert, n_chains=8, chunk_size=4),
        "hamiltonian": lambda: nk.sampler.MetropolisHamiltonianNumpy(hilbert, H.to_local_operator(), n_chains=8),
        "custom": lambda: nk.sampler.MetropolisCustom(hilbert, move_operators=moves, n_chains=8),
    }
    for name, sampler in samplers.items():

        def build():
            return builders.mc_state(sampler=sampler(), model=nk.models.RBM(alpha=1, param_dtype=complex), n_samples=32)

        first = build()
        first.sample()
        nkserde.save(first, tmp_path / f"{name}.nks")
        loaded = nkserde.load(build(), tmp_path / f"{name}.nks")
        assert_identical(loaded, first)
        assert np.asarray(loaded.sample()).tobytes() == np.asarray(first.sample()).tobytes(), name


def test_check_only_describes_jax_arrays_by_shape_and_dtype():
    """What the rule compares of a template, without reading its arrays."""
    sd = nkserde.saving.snapshot.to_state_dict({"a": jax.numpy.ones((2, 3))}, check_only=True)
    assert isinstance(sd["a"], jax.ShapeDtypeStruct) and sd["a"].shape == (2, 3)
