"""A simulated cluster in one process: many simulated nodes, each a real agent on its own
port, stepped on one clock, with the cluster's management host probing their BMCs and,
with a queue, a Slurm controller whose agent reads it; what `nvwatch simulate fleet` and
the end-to-end tests run under Prometheus."""
