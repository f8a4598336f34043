"""A NetKet ground-state run that a SLURM job (job.sh) checkpoints, requeues
and resumes until it is done: the one nkserde line is ``checkpointed``.

    sbatch job.sh          # one task
    sbatch -n 4 job.sh     # four processes, one run
"""

import os

import jax

if int(os.environ.get("SLURM_NTASKS", "1")) > 1:
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU nodes
    # ranks and coordinator from SLURM's environment; a heartbeat timeout
    # above the longest suspension (PreemptMode=SUSPEND, gang scheduling):
    # JAX aborts a job suspended for longer (default 100 s)
    jax.distributed.initialize(heartbeat_timeout_seconds=24 * 3600)

import netket as nk
import optax

import nkserde

graph = nk.graph.Square(4)
hilbert = nk.hilbert.Spin(0.5, N=graph.n_nodes, total_sz=0)
hamiltonian = nk.operator.Heisenberg(hilbert, graph)
sampler = nk.sampler.MetropolisExchange(hilbert, graph=graph, n_chains=16)
vstate = nk.vqs.MCState(sampler, nk.models.RBM(alpha=2), n_samples=2048, seed=1, sampler_seed=2)
gs = nk.driver.VMC_SR(hamiltonian, optax.sgd(0.01), variational_state=vstate, diag_shift=1e-3)

gs = nkserde.checkpointed(gs, "ckpt", every=50)  # the one added line
gs.run(n_iter=20000, out="heisenberg")
