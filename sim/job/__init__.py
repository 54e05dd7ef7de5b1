"""A synchronous data-parallel job across GPUs and nodes: it runs at its slowest rank.

Every training step of a data-parallel job ends in an all-reduce that waits for every
rank, so one slow GPU, link, PCIe link or host slows all of them, while the healthy
ranks, waiting in NCCL kernels, still look busy (Minder, Greyhound: compare a job's
ranks with each other). `plan.py` says which GPUs of which fleet nodes are the job's
ranks and what each rank's node runs; `shadow.py` follows, per rank, what its node's
scenarios do to its speed, on a copy of its GPU `held.py` holds at the job's load;
`model.py` turns the ranks' speeds into the job's step and each rank's share of it
(computing, waiting for input, communicating, waiting for the others); `workload.py` is
the `Workload` each rank's GPU and HCA port run, read from that share.

Every node holding ranks of a job builds the job from the same plan, and each computes
the same steps from it alone: no node asks another anything, so nodes may run in any
order, in threads or in processes (a history steps one node through a month, then the
next).
"""
