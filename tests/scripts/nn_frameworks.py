"""NetKet's Examples/nn_frameworks/nnx.py and linen_bound.py (the same RBM
as a flax nnx Module and as a bound linen Module, VMC with SR and a
learning-rate schedule): one driver each, on 8 sites, fewer samples and
steps, seeds fixed, one ``nkserde.checkpointed`` line per driver (one
checkpoint directory: run-0 and run-1).

    python nn_frameworks.py WORKDIR
"""

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import netket as nk
import optax
from flax import linen as nn
from flax import nnx

import nkserde

out = Path(sys.argv[1])


class RBMnnx(nnx.Module):
    def __init__(self, N, alpha, rngs: nnx.Rngs, param_dtype=float):
        self.linear = nnx.Linear(N, alpha * N, param_dtype=param_dtype, rngs=rngs)
        self.visible_bias = nnx.Param(jax.random.uniform(rngs.params(), (N,), dtype=param_dtype))

    def __call__(self, x_in):
        y = jnp.sum(nk.nn.activation.log_cosh(self.linear(x_in)), axis=-1)
        return y + jnp.dot(x_in, self.visible_bias.value)


class RBMlinen(nn.Module):
    N: int
    alpha: int
    param_dtype: type = float

    def setup(self):
        self.linear = nn.Dense(self.alpha * self.N, param_dtype=self.param_dtype)
        self.bias = self.param("visible_bias", nn.initializers.zeros_init(), (self.N,), self.param_dtype)

    def __call__(self, x_in):
        return jnp.sum(nk.nn.activation.log_cosh(self.linear(x_in)), axis=-1) + jnp.dot(x_in, self.bias)


g = nk.graph.Hypercube(length=8, n_dim=1, pbc=True)
hi = nk.hilbert.Spin(s=1 / 2, N=g.n_nodes)
ha = nk.operator.Ising(hilbert=hi, graph=g, h=1.0)

linen_model = RBMlinen(hi.size, alpha=1)
variables = linen_model.init(jax.random.key(0), hi.random_state(jax.random.key(1), (1,)))
models = {"nnx": RBMnnx(hi.size, alpha=1, rngs=nnx.Rngs(0)), "linen_bound": linen_model.bind(variables)}

for name, model in models.items():
    sa = nk.sampler.MetropolisLocal(hi, n_chains=16)
    vs = nk.vqs.MCState(sa, model, n_samples=128, n_discard_per_chain=10, seed=1, sampler_seed=2)
    op = nk.optimizer.Sgd(learning_rate=optax.linear_schedule(0.1, 0.0001, 10))
    sr = nk.optimizer.SR(diag_shift=0.01)
    gs = nk.driver.VMC(ha, op, variational_state=vs, preconditioner=sr)
    gs = nkserde.checkpointed(gs, out / "ckpt", every=2)  # the added line
    gs.run(n_iter=10, out=str(out / name), show_progress=False)
print("finished", flush=True)
