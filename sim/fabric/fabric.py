"""A live simulated InfiniBand fabric: a real sysfs tree on disk that the agent reads.

`SimulatedFabric` writes `class/infiniband/mlx5_N/...` for every NIC of a hardware
profile, and the PCI device tree (`devices/pci0000:00/<root port>/<switch up>/<switch
down>/<endpoint>`, `bus/pci/devices/<bus id>` links) for every GPU and NIC from
`profiles.pci_path`, so the InfiniBand source and the GPU <-> HCA affinity run the same
code path as on a real DGX. Counters integrate the shared `Workload` (the same all-reduce
bursts the simulated NVML shows as NVLink traffic) over an injectable clock; one port's
counters and scenarios are in `nvwatch.sim.fabric.ib_port`.

Files are replaced atomically (write a dot-file, then os.replace), and only when their
text changes, so a reader polling concurrently never sees half a number; the static
structure and the file writing live in `nvwatch.sim.fabric.tree`. An HCA whose driver is
unloaded (ib-hca-vanish) leaves `class/infiniband` whole, with one rename, and comes back
the same way; its PCI function stays, as on a real node.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from nvwatch.sim.fabric.ib_port import (
    CONGESTION_STALL,
    FLAP_DOWN_S,
    FLAP_PERIOD_S,
    XMIT_WAIT_TICKS_PER_SECOND,
    PortFault,
    SimulatedPort,
    degraded_rate,
)
from nvwatch.sim.fabric.tree import TreeWriter, write_structure
from nvwatch.sim.profiles import Profile, get_profile, gpu_pci_bus_id
from nvwatch.sim.scenario_names import FABRIC_SCENARIOS, HCA_SCENARIOS, IB_SCENARIOS, onset
from nvwatch.sim.workload import Workload

__all__ = [
    "CONGESTION_STALL",
    "FABRIC_SCENARIOS",
    "FLAP_DOWN_S",
    "FLAP_PERIOD_S",
    "HCA_SCENARIOS",
    "IB_SCENARIOS",
    "XMIT_WAIT_TICKS_PER_SECOND",
    "SimulatedFabric",
    "degraded_rate",
    "is_ib_scenario",
]

# where a vanished HCA's class directory waits: outside class/infiniband, on the same
# filesystem (so moving it is one rename), and a dot-name nothing lists
VANISHED_DIR = ".nvwatch-vanished"


def is_ib_scenario(name: str) -> bool:
    """True for the fabric's scenarios; GPU scenarios belong to the simulated NVML."""
    return name in FABRIC_SCENARIOS


def _check_ib_scenario(name: str) -> None:
    if not is_ib_scenario(name):
        raise ValueError(
            f"unknown InfiniBand scenario {name!r} (known: {', '.join(FABRIC_SCENARIOS)})"
        )


class SimulatedFabric:
    """The sysfs side of a simulated node: HCAs, ports, counters and the PCI tree."""

    def __init__(
        self,
        profile: Profile | str,
        root: Path,
        *,
        workload: Workload | None = None,
        scenario: str | None = None,
        port_scenarios: Mapping[str, str] | None = None,
        seed: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`scenario` is the node's scenario: an InfiniBand one applies to mlx5_0 (the
        first HCA; ib-hca-vanish to every HCA); a GPU scenario name is accepted and
        ignored, it belongs to the simulated NVML. `port_scenarios` maps a device
        ("mlx5_3") to an IB scenario. `start_scenario` adds one with a time window.
        """
        self.profile = get_profile(profile) if isinstance(profile, str) else profile
        self.root = Path(root)
        self.workload = workload if workload is not None else Workload(seed=seed)
        self.seed = seed
        self._clock = clock
        self._now = self._start = clock()
        self._ports = {
            nic.device: SimulatedPort(nic, self.workload, seed) for nic in self.profile.nics
        }
        if scenario is not None and scenario.startswith("ib-"):
            self.start_scenario(scenario)
        for device, name in (port_scenarios or {}).items():
            self.start_scenario(name, device)
        self._writer = TreeWriter(self.root)
        self._structure_done = False
        self._hidden: set[str] = set()
        self._port_paths: dict[tuple[str, str], Path] = {}

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(self._ports)

    def port(self, device: str) -> SimulatedPort:
        """The simulated port of HCA `device` (its counters and state, for readers that
        skip the files: the history generator)."""
        return self._ports[device]

    @property
    def scenarios(self) -> dict[str, str]:
        """Device -> the IB scenario running on it (the latest, where there are several)."""
        running = {d: p.running(self._now) for d, p in self._ports.items()}
        return {d: names[-1] for d, names in running.items() if names}

    def gpu_bus_ids(self) -> list[str]:
        """NVML-style bus ids of the profile's GPUs, for InfinibandSource(gpu_bus_ids=)."""
        return [gpu_pci_bus_id(self.profile, i) for i in range(self.profile.gpu_count)]

    # --- scenarios ---------------------------------------------------------------------

    def start_scenario(
        self,
        name: str,
        device: str | None = None,
        *,
        since_s: float | None = None,
        until_s: float | None = None,
        slowdown: float | None = None,
    ) -> list[str]:
        """Run scenario `name` on `device` (None: the first HCA, or every HCA for
        ib-hca-vanish) from `since_s` to `until_s` seconds after the fabric started
        (None: its onset in sim/scenario_names.py; never ends); `slowdown`: the share of
        a congested port's throughput lost. Returns ['name@device', ...]."""
        _check_ib_scenario(name)
        devices = list(self._ports)
        if not devices:
            raise ValueError(
                f"scenario {name!r} needs an InfiniBand port; "
                f"profile {self.profile.name!r} has none"
            )
        if device is not None and device not in devices:
            raise ValueError(
                f"no device {device!r} in profile {self.profile.name!r} "
                f"(devices: {', '.join(devices)})"
            )
        if device is None:
            devices = devices if name in HCA_SCENARIOS else devices[:1]
        else:
            devices = [device]
        since = self._start + (onset(name) if since_s is None else since_s)
        until = math.inf if until_s is None else self._start + until_s
        for target in devices:
            self._ports[target].faults.append(PortFault(name, since, until, slowdown))
        return [f"{name}@{target}" for target in devices]

    def end_scenarios(self, name: str | None = None, device: str | None = None) -> list[str]:
        """End the scenarios named `name` (None: all) on `device` (None: every HCA) as of
        the clock's now: ports re-train, congestion and errors stop, vanished HCAs return
        at the next write(). Returns ['name@device', ...]."""
        self.advance()
        ended = []
        for target, port in self._ports.items():
            if device in (None, target):
                ended += [f"{n}@{target}" for n in port.end(name, self._now)]
        return ended

    # --- time and files ----------------------------------------------------------------

    def advance(self) -> None:
        """Integrate every counter up to clock()."""
        now = self._clock()
        if now <= self._now:
            return
        for port in self._ports.values():
            port.integrate(self._now, now)
        self._now = now

    def write(self) -> None:
        """Create the tree on first use, then replace the files whose text changed."""
        if not self._structure_done:
            write_structure(self._writer, self.profile, self.seed)
            self._structure_done = True
        for device, port in self._ports.items():
            if not self._show(device, port.present(self._now)):
                continue
            for relative, text in port.files(self._now).items():
                self._writer.put(self._port_path(device, relative), text)

    def _port_path(self, device: str, relative: str) -> Path:
        # kept: building four-part paths for every file of every tick was most of a
        # write on tmpfs (a fleet writes 124 trees per interval)
        key = (device, relative)
        path = self._port_paths.get(key)
        if path is None:
            path = self.root / "class" / "infiniband" / device / "ports" / "1" / relative
            self._port_paths[key] = path
        return path

    def _show(self, device: str, present: bool) -> bool:
        """Move a vanished HCA's class directory aside, and back when it returns.

        Its files travel with it unchanged, so what the writer last wrote is still what
        they say, and the next write() brings them up to date. Returns `present`.
        """
        live = self.root / "class" / "infiniband" / device
        aside = self.root / VANISHED_DIR / device
        if present and device in self._hidden:
            os.rename(aside, live)
            self._hidden.discard(device)
        elif not present and device not in self._hidden:
            aside.parent.mkdir(exist_ok=True)
            os.rename(live, aside)
            self._hidden.add(device)
        return present

    def tick(self) -> None:
        """advance() then write(): what a driver loop calls before each poll."""
        self.advance()
        self.write()
