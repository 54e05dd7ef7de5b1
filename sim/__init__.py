"""The simulator: a stand-in for libnvidia-ml under the real pynvml, a live sysfs tree,
hardware profiles and fault scenarios, a fleet in one process and its history. A test
bed and a demo; the agent reaches it only through nvwatch.agent.simulation.

A sub-package per thing it stands in for: `nvml` (the library) over `gpu` (the boards),
`fabric` (InfiniBand in sysfs), `bmc` (the chassis), `node` (one node of them), `fleet`
(many, in one process), `queue` (a Slurm queue), `history` (a fleet's past), `commands`
(`nvwatch simulate`, `nvwatch profiles`). What they share stays here: the hardware
`profiles`, the `workload` that drives GPUs and fabric alike, `clock`, `ports`.
"""

from nvwatch.sim.pynvml_check import require_pynvml

require_pynvml()
