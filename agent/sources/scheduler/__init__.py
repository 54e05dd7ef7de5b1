"""The scheduler source: the cluster's GPU demand and fairness as Slurm sees them.

Run once per cluster (on the controller or a login node, `--sources scheduler`), on its
own interval, off the hot path: who waits for GPUs, how many, why, and whether each
account gets its share.
"""
