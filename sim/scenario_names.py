"""Every simulation scenario's name and onset, declared here once and light to import.

`--help` of every command that takes --scenario lists these names and onsets: reading
them from the modules that run the scenarios (sim/gpu, sim/fabric, sim/bmc, sim/node)
loaded 50 simulator modules, the simulated NVML among them, to print a help text. Those
modules take their names from here.
"""

from __future__ import annotations

# they set what the GPUs run (cold-start: training on GPUs that sat idle, which warm up;
# the others begin in the workload's thermal steady state); nothing to repair
WORKLOAD_SCENARIOS: tuple[str, ...] = ("healthy-training", "idle", "cold-start")
FAULT_SCENARIOS: tuple[str, ...] = (
    "thermal-runaway",
    "power-capped",
    "nvlink-degraded",
    "ecc-dbe",
    "gpu-lost",
    "xid-storm",
    "gpu-slow",
    "pcie-downtrained",
)
GPU_SCENARIOS = WORKLOAD_SCENARIOS + FAULT_SCENARIOS
# node-wide: the kernel module is missing, the GPUs' PCI functions are still there
DRIVER_SCENARIOS: tuple[str, ...] = ("nvml-driver-broken",)
NVML_SCENARIOS = GPU_SCENARIOS + DRIVER_SCENARIOS

# scenarios of one port; they begin as the fabric starts unless told otherwise
IB_SCENARIOS: tuple[str, ...] = (
    "ib-congestion",
    "ib-link-flap",
    "ib-degraded",
    "ib-symbol-errors",
)
# an HCA's presence: node-wide it takes every HCA (an mlx5_ib unload), @mlx5_N one
HCA_SCENARIOS: tuple[str, ...] = ("ib-hca-vanish",)
FABRIC_SCENARIOS = IB_SCENARIOS + HCA_SCENARIOS

# the node's host: its CPUs, which feed the GPUs their input (sim/node/host.py)
HOST_SCENARIOS: tuple[str, ...] = ("cpu-starved",)

# the chassis around the node, as its BMC sees it (sim/bmc/scenarios.py)
BMC_SCENARIOS: tuple[str, ...] = ("hot-aisle", "fan-failure", "psu-failure", "bmc-unreachable")

FAULT_ONSET_S = 30.0  # a few 5 s polls of healthy baseline before the fault

# scenarios that slow what they hit and take `slowdown=S` (0 < S < 1): the part they
# break runs at 1 - S of its healthy speed (a synchronous job's rank with it takes that
# much longer for the part: sim/job/)
SLOWDOWN_SCENARIOS: tuple[str, ...] = (
    "gpu-slow",
    "power-capped",
    "thermal-runaway",
    "nvlink-degraded",
    "pcie-downtrained",
    "ib-congestion",
    "cpu-starved",
)
# what each one's `slowdown=` is when none is given (None: the scenario's own fixed
# effect, as before slowdown= existed)
DEFAULT_SLOWDOWN: dict[str, float] = {
    "gpu-slow": 0.2,
    "pcie-downtrained": 0.5,
    "cpu-starved": 0.3,
}


def known_scenarios() -> tuple[str, ...]:
    return tuple(
        dict.fromkeys((*NVML_SCENARIOS, *FABRIC_SCENARIOS, *HOST_SCENARIOS, *BMC_SCENARIOS))
    )


def onset(name: str) -> float:
    """Seconds after the node starts a scenario begins when no from= says otherwise: a
    workload at once, a port's fault as the fabric starts, every other fault (a
    vanishing HCA included: the agent must have seen it) after a healthy baseline."""
    if name in WORKLOAD_SCENARIOS or name in IB_SCENARIOS:
        return 0.0
    return FAULT_ONSET_S
