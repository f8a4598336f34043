"""NetKet's Examples/Continuous/HO.py (particles in a harmonic trap, a
Gaussian ansatz, VMC_SR) with 2 particles instead of 10, fewer samples and
steps, seeds fixed, one ``nkserde.checkpointed`` line.

    python continuous_ho.py WORKDIR
"""

import sys
from pathlib import Path

import jax.numpy as jnp
import netket as nk
from netket import experimental as nkx

import nkserde

out = Path(sys.argv[1])


def v(x):
    return jnp.linalg.norm(x) ** 2


space = nkx.geometry.Cell(d=3, L=(jnp.inf, jnp.inf, jnp.inf), pbc=False)
hilb = nkx.hilbert.Particle(N=2, geometry=space)
sab = nk.sampler.MetropolisGaussian(hilb, sigma=0.1, n_chains=16, sweep_size=8)
ekin = nk.operator.KineticEnergy(hilb, mass=1.0)
pot = nk.operator.PotentialEnergy(hilb, v)
ha = ekin + 0.5 * pot
model = nk.models.Gaussian(param_dtype=float)
vs = nk.vqs.MCState(sab, model, n_samples=256, n_discard_per_chain=16, seed=1, sampler_seed=2)
op = nk.optimizer.Sgd(0.05)
gs = nk.driver.VMC_SR(ha, op, variational_state=vs, diag_shift=0.01)
gs = nkserde.checkpointed(gs, out / "ckpt", every=2)  # the added line
gs.run(n_iter=10, out=str(out / "HO_2_3d"), show_progress=False)
print("finished", flush=True)
