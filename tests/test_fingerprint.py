"""The "same script?" fingerprint (nkserde/checkpoint/fingerprint/): which changes a
``resume="auto"`` refuses, which it accepts, and that it is the same in
every Python process (PYTHONHASHSEED) for models whose repr is not."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import jax
import netket as nk
import netket.experimental as nkx
import numpy as np
import optax
import pytest

from nkserde.checkpoint.fingerprint import READABLE, changes, differences, fingerprint

L = 8


def heisenberg(J2=0.5, field=0.0, pbc=True, total_sz=0, jax_op=True):
    graph = nk.graph.Chain(L, pbc=pbc, max_neighbor_order=2)
    hilbert = nk.hilbert.Spin(0.5, N=L, total_sz=total_sz)
    H = nk.operator.Heisenberg(hilbert, graph, J=[1.0, J2])
    if field:
        H = H + field * nk.operator.spin.sigmaz(hilbert, 0)
    # NetKet 3.23 builds a LocalOperatorJax, whose repr shows no couplings
    return H.to_jax_operator() if jax_op else H.to_numba_operator()


def vmc(
    J2=0.5,
    field=0.0,
    pbc=True,
    total_sz=0,
    model="rbm",
    alpha=1,
    sampler="exchange",
    n_chains=8,
    n_samples=64,
    n_discard=2,
    optimizer=None,
    diag_shift=0.01,
    chunk_size=None,
    jax_op=True,
):
    graph = nk.graph.Chain(L, pbc=pbc, max_neighbor_order=2)
    hilbert = nk.hilbert.Spin(0.5, N=L, total_sz=total_sz)
    H = heisenberg(J2, field, pbc, total_sz, jax_op)
    if model == "rbm":
        net = nk.models.RBM(alpha=alpha, param_dtype=float)
    elif model == "gcnn":
        net = nk.models.GCNN(symmetries=graph, layers=1, features=2, param_dtype=float)
    else:  # gcnn over all symmetries or translations only, one implementation
        group = graph.automorphisms() if model == "gcnn-irreps" else graph.translation_group()
        net = nk.models.GCNN(symmetries=group, layers=1, features=2, param_dtype=float, mode="irreps")
    if sampler == "exchange":
        sa = nk.sampler.MetropolisExchange(hilbert, graph=graph, n_chains=n_chains)
    else:
        sa = nk.sampler.MetropolisHamiltonian(hilbert, H, n_chains=n_chains)
    vs = nk.vqs.MCState(
        sa, net, n_samples=n_samples, n_discard_per_chain=n_discard, seed=0, sampler_seed=1, chunk_size=chunk_size
    )
    opt = optimizer if optimizer is not None else optax.sgd(0.01)
    return nk.driver.VMC(H, opt, variational_state=vs, preconditioner=nk.optimizer.SR(diag_shift=diag_shift))


def tdvp(h=0.5, dt=0.01, solver="RK4"):
    graph = nk.graph.Chain(L)
    hilbert = nk.hilbert.Spin(0.5, N=L)
    H = nk.operator.Ising(hilbert, graph, h=h)
    vs = nk.vqs.FullSumState(hilbert, nk.models.RBM(alpha=1, param_dtype=complex), seed=0)
    return nkx.TDVP(H, variational_state=vs, ode_solver=getattr(nkx.dynamics, solver)(dt=dt))


BASE = fingerprint(vmc())

# change -> (the entry that changed, the line that says it, as the user wrote it)
REFUSED = {
    "coupling J2 0.5 -> 0.8": (dict(J2=0.8), "operator", "operator: LocalOperator term X0 X2 0.5 -> 0.8"),
    "an added operator term": (dict(field=0.3), "operator", "operator: LocalOperator term Z0 (none) -> 0.3"),
    "open instead of periodic lattice": (
        dict(pbc=False),
        "operator",
        "operator: LocalOperator term X0 X7 1.0 -> (none)",
    ),
    "total_sz constraint dropped": (
        dict(total_sz=None),
        "hilbert",
        "hilbert: Spin(s=1/2, N=8, ordering=new, total_sz=0) -> Spin(s=1/2, N=8, ordering=new)",
    ),
    "model width": (dict(alpha=2), "model.alpha", "model: RBM alpha 1 -> 2"),
    "model architecture": (dict(model="gcnn"), "model", "model: RBM -> GCNN"),
    "sampler rule": (
        dict(sampler="hamiltonian"),
        "sampler.rule",
        "sampler: MetropolisSampler rule ExchangeRule -> HamiltonianRule",
    ),
    "number of chains": (dict(n_chains=16), "n_chains", "n_chains: 8 -> 16"),
    "number of samples": (dict(n_samples=128), "n_samples", "n_samples: 64 -> 128"),
    "discarded samples": (dict(n_discard=4), "n_discard_per_chain", "n_discard_per_chain: 2 -> 4"),
    "learning rate": (dict(optimizer=optax.sgd(0.02)), "optimizer", "optimizer: sgd learning_rate 0.01 -> 0.02"),
    "optimizer": (dict(optimizer=optax.adam(0.01)), "optimizer", "optimizer: sgd -> adam"),
    "preconditioner setting": (
        dict(diag_shift=0.1),
        "preconditioner.diag_shift",
        "preconditioner: SR diag_shift 0.01 -> 0.1",
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_refused_changes(name):
    kwargs, key, line = REFUSED[name]
    found = differences(BASE, fingerprint(vmc(**kwargs)))
    assert any(d.key == key and d.line.startswith(line) for d in found), [d.line for d in found]


def test_a_refusal_says_what_changed_in_the_words_of_the_script():
    """The three changes of issue 28: a field, a learning rate, a width;
    each named by the object, its kind, the parameter and the values, and
    nothing else listed (the parameter shapes follow from the width)."""

    def ising_vmc(h=1.0, learning_rate=0.01, alpha=1):
        hilbert = nk.hilbert.Spin(0.5, N=L)
        H = nk.operator.Ising(hilbert, nk.graph.Chain(L), h=h)
        sampler = nk.sampler.MetropolisLocal(hilbert, n_chains=8)
        vs = nk.vqs.MCState(sampler, nk.models.RBM(alpha=alpha, param_dtype=float), n_samples=64, seed=0)
        return nk.driver.VMC(H, optax.adam(learning_rate), variational_state=vs)

    base = fingerprint(ising_vmc())
    assert changes(base, fingerprint(ising_vmc(h=1.5))) == ["operator: Ising h 1.0 -> 1.5"]
    assert changes(base, fingerprint(ising_vmc(learning_rate=0.02))) == ["optimizer: adam learning_rate 0.01 -> 0.02"]
    assert changes(base, fingerprint(ising_vmc(alpha=2))) == ["model: RBM alpha 1 -> 2"]
    assert not any(_looks_like_a_hash(v) for k, v in base.items() if READABLE in k)


def _looks_like_a_hash(text):
    return any(len(word) == 16 and all(c in "0123456789abcdef" for c in word) for word in text.split())


def test_initializers_are_not_part_of_the_run():
    """The parameters come from the checkpoint: another initializer (or the
    way a flax release spells its defaults) is the same run."""
    hilbert = nk.hilbert.Spin(0.5, N=L)
    H = nk.operator.Ising(hilbert, nk.graph.Chain(L), h=1.0)

    def build(stddev):
        model = nk.models.RBM(alpha=1, param_dtype=float, kernel_init=jax.nn.initializers.normal(stddev))
        vs = nk.vqs.MCState(nk.sampler.MetropolisLocal(hilbert, n_chains=8), model, n_samples=64, seed=0)
        return nk.driver.VMC(H, optax.sgd(0.01), variational_state=vs)

    fp = fingerprint(build(0.01))
    assert changes(fp, fingerprint(build(0.5))) == []
    assert not [k for k in fp if "_init" in k]


def test_functions_of_one_argument_are_compared_by_what_they_compute():
    """A schedule or an activation is its values, not its name: two lambdas
    (which share the name ``<lambda>`` and close over nothing) differ; a
    schedule's hyperparameters name the change."""
    steps = fingerprint(vmc(optimizer=optax.sgd(optax.linear_schedule(0.01, 0.001, 100))))
    longer = fingerprint(vmc(optimizer=optax.sgd(optax.linear_schedule(0.01, 0.001, 200))))
    assert "optimizer: sgd polynomial_schedule.transition_steps 100 -> 200" in changes(steps, longer)

    hilbert = nk.hilbert.Spin(0.5, N=L)

    def with_activation(f):
        model = nk.models.RBM(alpha=1, param_dtype=float, activation=f)
        vs = nk.vqs.MCState(nk.sampler.MetropolisLocal(hilbert, n_chains=8), model, n_samples=64, seed=0)
        H = nk.operator.Ising(hilbert, nk.graph.Chain(L), h=1.0)
        return nk.driver.VMC(H, optax.sgd(0.01), variational_state=vs)

    square, cube = fingerprint(with_activation(lambda x: x**2)), fingerprint(with_activation(lambda x: x**3))
    found = differences(square, cube)
    assert [d.key for d in found] == ["model.activation"], found
    assert changes(square, fingerprint(with_activation(lambda x: x**2))) == []


def test_a_schedule_of_the_preconditioner_is_compared_by_its_values():
    def vmc_sr(diag_shift):
        vs = vmc().state
        return nk.driver.VMC_SR(heisenberg(), optax.sgd(0.01), variational_state=vs, diag_shift=diag_shift)

    a, b = fingerprint(vmc_sr(lambda step: 0.1)), fingerprint(vmc_sr(lambda step: 0.2))
    assert changes(a, b) == ["diag_shift: <lambda> values 0.1 -> 0.2"]  # what it computes: nothing else differs
    decay = fingerprint(vmc_sr(optax.linear_schedule(0.1, 0.01, 50)))
    faster = fingerprint(vmc_sr(optax.linear_schedule(0.1, 0.01, 25)))
    assert changes(decay, faster) == ["diag_shift: polynomial_schedule transition_steps 50 -> 25"]


def test_per_step_results_are_not_part_of_the_run():
    """SR keeps the last step's QGT (``_lhs``), solution and solver info;
    VMC_SR its solver info: after a run() the fingerprint is what it was
    before (a script that calls run() twice on one driver resumes both)."""
    sr = vmc()
    vmc_sr = nk.driver.VMC_SR(heisenberg(), optax.sgd(0.01), variational_state=vmc().state, diag_shift=0.01)
    for driver in (sr, vmc_sr):
        before = fingerprint(driver)
        driver.run(2, show_progress=False)
        after = fingerprint(driver)
        assert after == before, changes(before, after)


def test_the_same_physics_written_differently_is_the_same_run():
    # a numba LocalOperator and its jax version act the same: one entry
    assert changes(BASE, fingerprint(vmc(jax_op=False))) == []


def test_accepted_changes():
    assert changes(BASE, fingerprint(vmc(chunk_size=32))) == []  # memory, not physics
    assert changes(BASE, fingerprint(vmc())) == []
    assert not any(socket.gethostname() in v for v in BASE.values())


def test_symmetry_group_is_compared_by_content():
    full, translations = fingerprint(vmc(model="gcnn-irreps")), fingerprint(vmc(model="gcnn-translations"))
    assert any(line.startswith("model: GCNN_Irrep symmetries int64[16, 8] ") for line in changes(full, translations))
    assert changes(full, fingerprint(vmc(model="gcnn-irreps"))) == []


@pytest.mark.parametrize(
    "kwargs,key",
    [
        (dict(h=2.0), "operator"),  # a quench to another field: TDVP keeps the operator in a lambda
        (dict(dt=0.02), "integrator.solver"),
        (dict(solver="Heun"), "integrator.solver"),
    ],
)
def test_dynamics_changes_are_refused(kwargs, key):
    found = changes(fingerprint(tdvp()), fingerprint(tdvp(**kwargs)))
    assert any(line.startswith(key) for line in found), found


def test_an_infidelity_target_from_a_random_seed_is_the_same_run():
    """NetKet's Infidelity example builds its target without a seed: the
    target's parameters are state (the checkpoint restores them), not part
    of what defines the run."""
    graph = nk.graph.Chain(L)
    hilbert = nk.hilbert.Spin(0.5, N=L)
    H = nk.operator.Ising(hilbert, graph, h=1.0)

    def build():
        sampler = nk.sampler.MetropolisLocal(hilbert, n_chains=8)
        target = nk.vqs.MCState(sampler, nk.models.RBM(alpha=1), n_samples=64)  # random seed
        vs = nk.vqs.MCState(sampler, nk.models.RBM(alpha=1), n_samples=64, seed=0, sampler_seed=1)
        return nk.driver.Infidelity_SR(target, optax.sgd(0.01), operator=H, variational_state=vs, diag_shift=1e-4)

    assert changes(fingerprint(build()), fingerprint(build())) == []


def qsr(basis_letters="XYZ"):
    """NetKet's QSR on 4 spins: measurement bases as strings, which NetKet
    turns into an object array of operators (one per measurement)."""
    hilbert = nk.hilbert.Spin(0.5, N=4)
    rng = np.random.default_rng(7)
    bases = ["".join(rng.choice(list(basis_letters), size=4)) for _ in range(60)]
    sigma = (2.0 * rng.integers(0, 2, size=(60, 4)) - 1).astype(float)
    vs = nk.vqs.MCState(nk.sampler.MetropolisLocal(hilbert, n_chains=8), nk.models.RBM(alpha=1), n_samples=64, seed=0)
    return nkx.QSR((sigma, bases), 16, optax.sgd(0.01), variational_state=vs, seed=7)


def _device_of(x) -> int:
    """The id of the device ``x`` is on (0 for a value JAX is tracing)."""
    try:
        return min(d.id for d in x.devices())
    except (AttributeError, jax.errors.ConcretizationTypeError):
        return 0


def device_arithmetic_log_cosh(x):
    """log_cosh as another platform's arithmetic computes it: off in the
    7th digit on device 1 (a TPU's emulated float64, a GPU's own exp)."""
    return nk.nn.log_cosh(x) * (1 + 1e-6 * _device_of(x))


def device_arithmetic_schedule(step):
    """A learning-rate schedule off in the 7th digit on device 1."""
    return 0.01 / (1 + step / 100) * (1 + 1e-6 * _device_of(step))


def device_arithmetic_vmc():
    """A VMC whose model and optimizer compute otherwise on device 1."""
    hilbert = nk.hilbert.Spin(0.5, N=4)
    H = nk.operator.Ising(hilbert, nk.graph.Chain(4), h=1.0)
    model = nk.models.RBM(alpha=1, param_dtype=float, activation=device_arithmetic_log_cosh)
    vs = nk.vqs.MCState(nk.sampler.MetropolisLocal(hilbert, n_chains=4), model, n_samples=16, seed=0)
    return nk.driver.VMC(H, optax.adam(device_arithmetic_schedule), variational_state=vs)


_PRINT_FINGERPRINTS = """
import json, sys
import jax, jax.numpy as jnp, numpy as np
sys.path.insert(0, {tests!r})
from test_fingerprint import device_arithmetic_log_cosh, device_arithmetic_vmc, qsr, vmc
from nkserde.checkpoint.fingerprint import fingerprint
import contextlib
from nkserde import jax_internals
first, second = jax.devices()
mesh = jax_internals.concrete_mesh()  # NetKet's, of both devices
def run_on(device):  # NetKet's mesh and JAX's default device of a run on that device alone
    context = contextlib.ExitStack()
    alone = jax.sharding.Mesh(np.array([device]), mesh.axis_names, axis_types=mesh.axis_types)
    context.enter_context(jax_internals.using_mesh(alone))
    context.enter_context(jax.default_device(device))
    return context
def log_cosh_on(device):
    with run_on(device):
        return np.asarray(device_arithmetic_log_cosh(jnp.linspace(-2.0, 2.0, 9)))
differs = bool((log_cosh_on(first) != log_cosh_on(second)).any())
with run_on(first):
    on_first = fingerprint(device_arithmetic_vmc())
with run_on(second):  # as a run on a GPU or TPU
    on_second = fingerprint(device_arithmetic_vmc())
devices = {{"arithmetic_differs": differs, "on_first": on_first, "on_second": on_second}}
print(json.dumps({{"gcnn": fingerprint(vmc(model="gcnn")), "qsr": fingerprint(qsr()), "devices": devices}}))
"""


@pytest.fixture(scope="module")
def in_other_processes():
    """The fingerprints of a GCNN's VMC and of a QSR, computed in another
    Python process, of a hash seed other than this one's (the tests compare
    them with this process's), with two CPU devices, and of a run placed on
    either (one launch for all: a launch imports NetKet). No cache: every
    probe computes there."""
    script = _PRINT_FINGERPRINTS.format(tests=str(Path(__file__).parent))
    # this process's seed is random, unless PYTHONHASHSEED fixes it
    env = {
        **os.environ,
        "PYTHONHASHSEED": "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
        "NKSERDE_COMPILATION_CACHE": "off",
    }
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(done.stdout.strip().splitlines()[-1])]


def test_same_in_every_process_whatever_the_hash_seed(in_other_processes):
    """A GCNN's repr holds HashableArray hashes that differ between Python
    processes; the fingerprint does not."""
    (other,) = (out["gcnn"] for out in in_other_processes)
    assert other == fingerprint(vmc(model="gcnn"))


def test_the_same_script_has_the_same_fingerprint_whatever_device_the_run_computes_on(in_other_processes):
    """A GPU's or a TPU's arithmetic differs from a CPU's in the last bits,
    which the probes' digests see: here an activation and a schedule whose
    values depend on the device they compute on, and a run whose default
    device is the second. Its fingerprint is the one of the run on the
    first: the probes compute on the host's CPU, so a run moved between a
    CPU and an accelerator is the same run."""
    (out,) = (run["devices"] for run in in_other_processes)
    assert out["arithmetic_differs"]  # the two devices do compute otherwise
    assert out["on_second"] == out["on_first"]


def test_probes_of_different_arithmetic_are_compared_by_what_they_say():
    """A process with no CPU backend (``JAX_PLATFORMS=tpu`` alone) probes on
    its accelerator, and its fingerprint says so: against one probed on a
    CPU its hashes say nothing, and the readable entries decide (the kind
    of optimizer and its learning rate, the model's activation)."""
    from nkserde.checkpoint.fingerprint.entries import PROBES_ON, is_hash

    on_cpu = fingerprint(fixture_vmc())
    # the same script probed by another arithmetic: every hash differs
    on_tpu = {k: (f"{v[:-4]}ffff" if is_hash(v) else v) for k, v in on_cpu.items()} | {PROBES_ON: "tpu"}
    assert any(is_hash(v) for v in on_cpu.values())
    assert changes(on_cpu, on_tpu) == []
    changed = fingerprint(fixture_vmc(learning_rate=2e-2))
    changed = {k: (f"{v[:-4]}ffff" if is_hash(v) else v) for k, v in changed.items()} | {PROBES_ON: "tpu"}
    assert changes(on_cpu, changed) == ["optimizer: adam learning_rate 0.01 -> 0.02"]
    same_arithmetic = {k: v for k, v in on_tpu.items() if k != PROBES_ON}
    assert changes(on_cpu, same_arithmetic)  # the same arithmetic: a hash that differs is a change


def test_an_object_array_is_fingerprinted_by_content_in_every_process(in_other_processes):
    """QSR's measurement bases are a numpy object array of operators: its
    bytes are pointers, different in every process (before: every restart
    of NetKet's QSR example was refused as another run). Described element
    by element, this process and others agree, and other bases are another run."""
    here = fingerprint(qsr())
    bases = [v for k, v in here.items() if v.startswith("object[")]
    assert bases, here  # the bases are described, as an object array
    assert all(out["qsr"] == here for out in in_other_processes)  # other processes, other addresses
    assert any("object[" in line for line in changes(here, fingerprint(qsr(basis_letters="XZ"))))


# fingerprint.json files of version 2 (nkserde before fingerprint version 3)
# on users' disks: the checkpoint fixtures' directories, written by nkserde
# 882baeb under NetKet 3.23.0 with jax 0.7.0, flax 0.10.6, optax 0.2.2 and by
# an earlier commit under NetKet 3.23.0 with jax 0.10.2, flax 0.12.8, optax 0.2.8
VERSION_2 = {
    name: json.loads((Path(__file__).parent / "fixtures" / name / "checkpoint/ckpt/fingerprint.json").read_text())
    for name in ("nkserde-882baeb", "netket-3.23.0")
}


def fixture_vmc(h=1.0, learning_rate=1e-2, alpha=1, activation=None):
    """The fixtures' checkpointed run (tests/fixtures/scenarios.py), with
    one setting changed."""
    hilbert = nk.hilbert.Spin(0.5, N=L)
    H = nk.operator.Ising(hilbert, nk.graph.Chain(L), h=h)
    model = nk.models.RBM(alpha=alpha, param_dtype=float, **({} if activation is None else {"activation": activation}))
    sampler = nk.sampler.MetropolisLocal(hilbert, n_chains=8)
    vs = nk.vqs.MCState(sampler, model, n_samples=64, seed=0, sampler_seed=1, n_discard_per_chain=2)
    return nk.driver.VMC(H, optax.adam(learning_rate), variational_state=vs)


@pytest.mark.parametrize("writer", sorted(VERSION_2))
def test_a_version_2_fingerprint_is_compared_as_version_3(writer):
    """Written under other flax and optax releases, a version 2 fingerprint
    is the same run (its initializers and optimizer function names are
    not compared); a changed learning rate, width, activation or field is
    still refused, named in words where version 2 has them."""
    saved = VERSION_2[writer]
    assert saved["fingerprint_version"] == "2"
    assert changes(saved, fingerprint(fixture_vmc())) == []
    learning_rate = ["optimizer: adam learning_rate 0.01 -> 0.02"]
    assert changes(saved, fingerprint(fixture_vmc(learning_rate=2e-2))) == learning_rate
    assert changes(saved, fingerprint(fixture_vmc(alpha=2))) == ["model: RBM alpha 1 -> 2"]
    assert changes(saved, fingerprint(fixture_vmc(activation=nk.nn.activation.reim_selu))) == [
        "model: RBM activation log_cosh -> partial"
    ]
    (field,) = changes(saved, fingerprint(fixture_vmc(h=1.5)))
    assert field.startswith(f"operator: {saved['operator']} -> content ") and "Ising" in field


def test_an_operator_on_a_space_too_large_to_count_is_compared_by_its_action():
    """100 spins: NetKet cannot count the states, so version 2 hashed the
    operator's fields (private names of a NetKet release); version 3 hashes
    its action on 64 states drawn with a fixed key, and compares a version 2
    fingerprint of it (written by nkserde 882baeb) with what version 2 writes."""
    n = 100

    def big(h, alpha=1):
        hilbert = nk.hilbert.Spin(0.5, N=n)
        H = nk.operator.Ising(hilbert, nk.graph.Chain(n), h=h)
        sampler = nk.sampler.MetropolisLocal(hilbert, n_chains=8)
        model = nk.models.RBM(alpha=alpha, param_dtype=float)
        vs = nk.vqs.MCState(sampler, model, n_samples=64, seed=0, n_discard_per_chain=2)
        return nk.driver.VMC(H, optax.adam(0.01), variational_state=vs)

    here = fingerprint(big(1.0))
    assert here["operator"] != here[f"operator{READABLE}version 2 text"]
    assert changes(here, fingerprint(big(1.0))) == []
    assert changes(here, fingerprint(big(1.5))) == ["operator: Ising h 1.0 -> 1.5"]
    # (version 2's fields of an IsingJax leave h out: what it wrote for h=1.5
    # is what it wrote for h=1.0, and such a file is compared as it was)
    saved = json.loads((Path(__file__).parent / "fixtures" / "fingerprint-v2" / "ising-100.json").read_text())
    assert changes(saved, here) == []
    assert changes(saved, fingerprint(big(1.0, alpha=2))) == ["model: RBM alpha 1 -> 2"]
