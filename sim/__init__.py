"""The simulator: a stand-in for libnvidia-ml under the real pynvml, a live sysfs tree,
hardware profiles and fault scenarios, a fleet in one process and its history. A test
bed and a demo; the agent reaches it only through nvwatch.agent.simulation."""

from nvwatch.sim.pynvml_check import require_pynvml

require_pynvml()
