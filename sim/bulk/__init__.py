"""A large fleet's past in bulk: a thousand nodes for a day, every series an agent of
its profile exports, written straight into Prometheus blocks (nvwatch.sim.tsdb) in
minutes, for measuring what dashboards and rules cost at that size.

It trades the detailed history's fidelity (nvwatch.sim.history steps every node's GPU
model, ports and BMC, and checks the report against its ground truth) for speed: each
node's series are its profile's rendered exposition, and their values follow one load
curve per GPU through a table of how each family moves with load (values.py).
"""
