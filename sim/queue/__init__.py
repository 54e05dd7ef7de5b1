"""A Slurm cluster's controller queue, simulated on a simulated clock: GPU jobs arrive
(seeded), wait, start on the partitions' nodes and end, and squeue, sinfo and sshare
print what a real slurmctld would answer. The fleet and the history both run it."""
