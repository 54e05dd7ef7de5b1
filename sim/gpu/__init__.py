"""One simulated GPU board, below the NVML library that reports on it: its power and
thermal physics, the records it keeps (links, ECC, events, activity), its MIG partitions
and the faults an operator is paged for. The simulated NVML (nvwatch.sim.nvml) reads
everything it answers from here."""
