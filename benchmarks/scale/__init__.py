"""The scale benchmark (benchmarks/scale_bench.py): the seed's 124-node DGX-1 fleet under
a real Prometheus with the mixin's rules, and the same fleet through the sharded
VictoriaMetrics path of deploy/scale, measured side by side; docs/scale.md from it.

`stack` starts and samples the processes, `measure` asks them what they cost, `report`
turns the figures into docs/scale.md with the arithmetic to bigger fleets.
"""
