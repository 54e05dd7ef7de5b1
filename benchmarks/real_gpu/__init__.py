"""The check of nvwatch on a real NVIDIA GPU, and the tools that turn its runs into tests.

`scripts/real-gpu-check OUTDIR` runs `check.py` (or against the simulator with
`--simulate PROFILE`); `scripts/import-real-gpu-run DIR` runs `fixture.py`, whose fixtures
under tests/real_gpu/ replay the recorded NVML answers (`tape.py`) through the agent.
Nothing here is part of the agent a node runs.
"""
