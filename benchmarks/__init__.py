"""Measured cost of the nvwatch agent per node; entry point: `python benchmarks/run.py`."""
