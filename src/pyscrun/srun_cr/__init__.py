"""srun_cr: srun with checkpoint/restart of every task with CRIU (see main.py)."""
