"""A live simulated InfiniBand fabric: a real sysfs tree on disk that the agent reads.

`SimulatedFabric` writes `class/infiniband/mlx5_N/...` for every NIC of a hardware
profile, and the PCI device tree (`devices/pci0000:00/<root port>/<switch up>/<switch
down>/<endpoint>`, `bus/pci/devices/<bus id>` links) for every GPU and NIC from
`profiles.pci_path`, so the InfiniBand source and the GPU <-> HCA affinity run the same
code path as on a real DGX. Counters integrate the shared `Workload` (the same all-reduce
bursts the simulated NVML shows as NVLink traffic) over an injectable clock.

Files are replaced atomically (write a dot-file, then os.replace), and only when their
text changes, so a reader polling concurrently never sees half a number; the static
structure and the file writing live in `agent.sim.fabric_tree`.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping
from fractions import Fraction
from pathlib import Path

from agent.sim.fabric_tree import TreeWriter, write_structure
from agent.sim.profiles import Nic, Profile, get_profile, gpu_pci_bus_id
from agent.sim.workload import Workload
from agent.sources.infiniband_parse import NARROW_COUNTER_BITS, format_rate, parse_rate

IB_SCENARIOS: tuple[str, ...] = (
    "ib-congestion",
    "ib-link-flap",
    "ib-degraded",
    "ib-symbol-errors",
)

# Link flap cycle: up for FLAP_PERIOD_S - FLAP_DOWN_S, then down (Polling) for
# FLAP_DOWN_S, starting FLAP_PERIOD_S - FLAP_DOWN_S after the fabric starts.
FLAP_PERIOD_S = 60.0
FLAP_DOWN_S = 10.0

# ~ port_xmit_wait ticks per second of a fully stalled port. The tick is implementation
# specific; ConnectX counts in units of a few ns, so ~2.5e8/s at a complete stall.
XMIT_WAIT_TICKS_PER_SECOND = 250_000_000
# Share of time a congested port stalls: above the mixin's default congestion ratio
# (5 %), and it fills the 32-bit counter in ~3.6 minutes, so a simulation also shows
# nvwatch_ib_port_reading_saturated going to 1, as on a real congested HCA.
CONGESTION_STALL = 0.08
# Credit waits of a healthy port, per unit of link busy time.
HEALTHY_STALL = 0.002
CONGESTED_THROUGHPUT = 0.6

MTU_BYTES = 4096
MAD_BYTES = 256  # subnet management / SA traffic is 256-byte MADs
SYMBOL_ERRORS_PER_SECOND = 5.0  # a marginal cable: 16-bit symbol_error fills in ~3.6 h
LINK_RECOVERIES_PER_SECOND = 1 / 120

# Files of ports/N/counters on an mlx5 port (kernel 5.x+), in the kernel's names.
_COUNTER_FILES = (
    "VL15_dropped",
    "excessive_buffer_overrun_errors",
    "link_downed",
    "link_error_recovery",
    "local_link_integrity_errors",
    "multicast_rcv_packets",
    "multicast_xmit_packets",
    "port_rcv_constraint_errors",
    "port_rcv_data",
    "port_rcv_errors",
    "port_rcv_packets",
    "port_rcv_remote_physical_errors",
    "port_rcv_switch_relay_errors",
    "port_xmit_constraint_errors",
    "port_xmit_data",
    "port_xmit_discards",
    "port_xmit_packets",
    "port_xmit_wait",
    "symbol_error",
    "unicast_rcv_packets",
    "unicast_xmit_packets",
)

# mlx5 ports/N/hw_counters (RDMA transport counters); RoCE ports add the congestion
# control (CNP/ECN) ones. `lifespan` is a setting, present as on real hardware.
_HW_COUNTERS_IB = (
    "duplicate_request",
    "implied_nak_seq_err",
    "local_ack_timeout_err",
    "out_of_buffer",
    "out_of_sequence",
    "packet_seq_err",
    "req_cqe_error",
    "req_cqe_flush_error",
    "req_remote_access_errors",
    "req_remote_invalid_request",
    "resp_cqe_error",
    "resp_cqe_flush_error",
    "resp_local_length_error",
    "resp_remote_access_errors",
    "rnr_nak_retry_err",
    "rx_atomic_requests",
    "rx_read_requests",
    "rx_write_requests",
)
_HW_COUNTERS_ROCE = (
    *_HW_COUNTERS_IB,
    "np_cnp_sent",
    "np_ecn_marked_roce_packets",
    "rp_cnp_handled",
    "rp_cnp_ignored",
    "roce_adp_retrans",
    "roce_slow_restart",
)
_HW_LIFESPAN_MS = "12"


def is_ib_scenario(name: str) -> bool:
    """True for the fabric's scenarios; GPU scenarios belong to the simulated NVML."""
    return name in IB_SCENARIOS


def _check_ib_scenario(name: str) -> None:
    if not is_ib_scenario(name):
        raise ValueError(f"unknown InfiniBand scenario {name!r} (known: {', '.join(IB_SCENARIOS)})")


def _port_scenarios(
    profile: Profile, scenario: str | None, port_scenarios: Mapping[str, str]
) -> dict[str, str]:
    """Device -> IB scenario: the node's scenario on the first HCA, then per-port ones."""
    devices = [nic.device for nic in profile.nics]
    targets: dict[str, str] = {}
    if scenario is not None and scenario.startswith("ib-"):
        _check_ib_scenario(scenario)
        if not devices:
            raise ValueError(
                f"scenario {scenario!r} needs an InfiniBand port; profile {profile.name!r} has none"
            )
        targets[devices[0]] = scenario
    for device, name in port_scenarios.items():
        _check_ib_scenario(name)
        if device not in devices:
            raise ValueError(
                f"no device {device!r} in profile {profile.name!r} "
                f"(devices: {', '.join(devices) or 'none'})"
            )
        targets[device] = name
    return targets


def degraded_rate(rate_text: str) -> str:
    """The rate a port trains down to: 4X -> 1X at the same speed (EDR 100 -> 25 Gb/s);
    a 1X port drops a speed grade instead (25 -> 10 Gb/s, as a RoCE port falling back)."""
    rate = parse_rate(rate_text)
    gbit = Fraction(rate.bytes_per_second, 125_000_000)
    if rate.width is not None and rate.width > 1:
        return format_rate(gbit / rate.width, 1, rate.speed)
    if gbit > 10:
        return format_rate(10, 1, "QDR")
    return format_rate(Fraction(5, 2), 1, "SDR")


class _Port:
    """One simulated HCA port (mlx5 NICs in the profiles have one port each)."""

    def __init__(
        self,
        nic: Nic,
        scenario: str | None,
        workload: Workload,
        seed: int,
        start: float,
    ) -> None:
        self.nic = nic
        self.scenario = scenario
        self.workload = workload
        self.start = start
        self.rng = random.Random(f"{seed}:{nic.device}")
        self.rate_text = degraded_rate(nic.rate) if scenario == "ib-degraded" else nic.rate
        self.rate_bytes = parse_rate(self.rate_text).bytes_per_second
        self.background_bytes_per_second = self.rng.uniform(1_000.0, 3_000.0)
        # A node that has been up a while: large data counters (2^36..2^40 words, so
        # the byte values exercise exact big integers), some packets, few errors.
        words = float(self.rng.randrange(1 << 36, 1 << 40))
        self.counters: dict[str, float] = dict.fromkeys(_COUNTER_FILES, 0.0)
        for direction in ("xmit", "rcv"):
            self.counters[f"port_{direction}_data"] = words * self.rng.uniform(0.97, 1.03)
            packets = self.counters[f"port_{direction}_data"] * 4 / MTU_BYTES
            self.counters[f"port_{direction}_packets"] = packets
            self.counters[f"unicast_{direction}_packets"] = packets * 0.999
            self.counters[f"multicast_{direction}_packets"] = packets * 0.001
        self.counters["port_xmit_wait"] = float(self.rng.randrange(0, 1_000_000))
        self.counters["symbol_error"] = float(self.rng.randrange(0, 3))
        hw_names = _HW_COUNTERS_ROCE if nic.link_layer == "Ethernet" else _HW_COUNTERS_IB
        self.hw: dict[str, float] = dict.fromkeys(hw_names, 0.0)
        self.hw["rx_write_requests"] = words * 4 / 65536
        self.flaps = 0

    # --- time-driven state -------------------------------------------------------------

    def _flaps_by(self, t: float) -> int:
        if self.scenario != "ib-link-flap":
            return 0
        first_down = FLAP_PERIOD_S - FLAP_DOWN_S
        elapsed = t - self.start
        if elapsed < first_down:
            return 0
        return math.floor((elapsed - first_down) / FLAP_PERIOD_S) + 1

    def is_up(self, t: float) -> bool:
        if self.scenario != "ib-link-flap":
            return True
        return (t - self.start) % FLAP_PERIOD_S < FLAP_PERIOD_S - FLAP_DOWN_S

    def integrate(self, t0: float, t1: float) -> None:
        busy, up_time = self._activity(t0, t1)
        self._add_traffic(busy, up_time)
        self._add_faults(t0, t1)
        for name, bits in NARROW_COUNTER_BITS.items():
            # The hardware saturates these instead of wrapping.
            self.counters[name] = min(self.counters[name], float((1 << bits) - 1))

    def _activity(self, t0: float, t1: float) -> tuple[float, float]:
        """(busy, up) seconds in [t0, t1): busy weighs up time by the workload's
        communication intensity, so all-reduce bursts move data and idle time does not."""
        elapsed = t1 - t0
        # Sample 8x per second: the workload's all-reduce bursts last ~0.6 s.
        steps = min(4096, max(16, math.ceil(elapsed * 8)))
        dt = elapsed / steps
        busy = up_time = 0.0
        for i in range(steps):
            t = t0 + (i + 0.5) * dt
            if self.is_up(t):
                up_time += dt
                busy += self.workload.comm_intensity(t) * dt
        return busy, up_time

    def _add_traffic(self, busy: float, up_time: float) -> None:
        congested = self.scenario == "ib-congestion"
        throughput = self.rate_bytes * (CONGESTED_THROUGHPUT if congested else 1.0)
        background = self.background_bytes_per_second * up_time
        c = self.counters
        for direction in ("xmit", "rcv"):
            payload = throughput * busy * self.rng.uniform(0.98, 1.02)
            c[f"port_{direction}_data"] += (payload + background) / 4
            packets = payload / MTU_BYTES + background / MAD_BYTES
            c[f"port_{direction}_packets"] += packets
            c[f"unicast_{direction}_packets"] += packets * 0.999
            c[f"multicast_{direction}_packets"] += packets * 0.001
        stall = CONGESTION_STALL * up_time if congested else HEALTHY_STALL * busy
        c["port_xmit_wait"] += stall * XMIT_WAIT_TICKS_PER_SECOND
        self.hw["rx_write_requests"] += throughput * busy / 65536
        self.hw["rx_read_requests"] += throughput * busy / 4_194_304
        if congested:
            self.hw["out_of_buffer"] += 50 * up_time
            if "np_cnp_sent" in self.hw:
                for name in ("np_cnp_sent", "rp_cnp_handled", "np_ecn_marked_roce_packets"):
                    self.hw[name] += 2_000 * up_time

    def _add_faults(self, t0: float, t1: float) -> None:
        c = self.counters
        new_flaps = self._flaps_by(t1) - self._flaps_by(t0)
        if new_flaps > 0:
            c["link_downed"] += new_flaps
            c["symbol_error"] += 40 * new_flaps  # the retrain that follows a flap
            self.hw["local_ack_timeout_err"] += 3 * new_flaps
        if self.scenario == "ib-symbol-errors":
            elapsed = t1 - t0
            c["symbol_error"] += SYMBOL_ERRORS_PER_SECOND * elapsed
            c["link_error_recovery"] += LINK_RECOVERIES_PER_SECOND * elapsed
            c["port_rcv_errors"] += SYMBOL_ERRORS_PER_SECOND / 10 * elapsed
            self.hw["packet_seq_err"] += SYMBOL_ERRORS_PER_SECOND / 10 * elapsed

    # --- sysfs text --------------------------------------------------------------------

    def files(self, t: float) -> dict[str, str]:
        """ports/1/... relative path -> file text, as of time t."""
        up = self.is_up(t)
        files = {
            "state": "4: ACTIVE" if up else "1: DOWN",
            "phys_state": "5: LinkUp" if up else "2: Polling",
            "rate": self.rate_text,
            "link_layer": self.nic.link_layer,
            "lid": "0x0" if self.nic.link_layer == "Ethernet" else f"0x{self._lid():x}",
        }
        for name, value in self.counters.items():
            files[f"counters/{name}"] = str(int(value))
        for name, value in self.hw.items():
            files[f"hw_counters/{name}"] = str(int(value))
        files["hw_counters/lifespan"] = _HW_LIFESPAN_MS
        return {path: text + "\n" for path, text in files.items()}

    def _lid(self) -> int:
        # Stable per device (not drawn from the running rng, so it never changes).
        return 1 + int(self.nic.device.rsplit("_", 1)[-1])


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
        first HCA); a GPU scenario name is accepted and ignored, it belongs to the
        simulated NVML. `port_scenarios` maps a device ("mlx5_3") to an IB scenario.
        """
        self.profile = get_profile(profile) if isinstance(profile, str) else profile
        self.root = Path(root)
        self.workload = workload if workload is not None else Workload(seed=seed)
        self.seed = seed
        self._clock = clock
        targets = _port_scenarios(self.profile, scenario, port_scenarios or {})
        self._now = clock()
        self._ports = {
            nic.device: _Port(nic, targets.get(nic.device), self.workload, seed, self._now)
            for nic in self.profile.nics
        }
        self._writer = TreeWriter(self.root)
        self._structure_done = False

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(self._ports)

    @property
    def scenarios(self) -> dict[str, str]:
        """Device -> the IB scenario running on it."""
        return {d: p.scenario for d, p in self._ports.items() if p.scenario is not None}

    def gpu_bus_ids(self) -> list[str]:
        """NVML-style bus ids of the profile's GPUs, for InfinibandSource(gpu_bus_ids=)."""
        return [gpu_pci_bus_id(self.profile, i) for i in range(self.profile.gpu_count)]

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
        base = self.root / "class" / "infiniband"
        for device, port in self._ports.items():
            for relative, text in port.files(self._now).items():
                self._writer.put(base / device / "ports" / "1" / relative, text)

    def tick(self) -> None:
        """advance() then write(): what a driver loop calls before each poll."""
        self.advance()
        self.write()
