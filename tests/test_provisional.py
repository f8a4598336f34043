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

import jax
import numpy as np
import pytest

import nkserde
import nkserde.api  # noqa: F401  (NetKet's registrations, before a test snapshots the registry)
from nkserde import registry
from nkserde.errors import TemplateMismatchError

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


def test_check_only_describes_jax_arrays_by_shape_and_dtype():
    """What the rule compares of a template, without reading its arrays."""
    sd = nkserde.tree.to_state_dict({"a": jax.numpy.ones((2, 3))}, check_only=True)
    assert isinstance(sd["a"], jax.ShapeDtypeStruct) and sd["a"].shape == (2, 3)
