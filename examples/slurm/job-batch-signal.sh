#!/bin/bash
#SBATCH --job-name=vmc
#SBATCH --time=04:00:00
#SBATCH --requeue
#SBATCH --signal=B:USR1@120
#SBATCH --open-mode=append
# B: sends the signal to this shell only: pass it on to the run (srun
# forwards it to every task), and wait for the run while the trap may fire
trap 'kill -USR1 "$run" 2>/dev/null' USR1
srun python run.py &
run=$!
wait "$run"  # returns early when the trap runs
wait "$run"
