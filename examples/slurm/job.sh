#!/bin/bash
#SBATCH --job-name=vmc
#SBATCH --time=04:00:00
#SBATCH --requeue
#SBATCH --signal=USR1@120
#SBATCH --open-mode=append
srun python run.py
