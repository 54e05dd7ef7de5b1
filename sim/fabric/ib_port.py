"""One simulated HCA port: its counters, its state, and the scenarios running on it.

`SimulatedFabric` (sim/fabric/fabric.py) owns the ports and writes their files. A port's
counters integrate the shared `Workload` between two clock readings; each scenario on it
is a `PortFault` active over [since, until) on the fabric's clock, so a scenario that
ends (on schedule, or repaired while running) leaves the port healthy from then on: the
link re-trained (ACTIVE / LinkUp, at its full rate), congestion and errors stopped, the
counts so far kept (`link_downed` among them).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from fractions import Fraction

from nvwatch.agent.sources.infiniband_parse import NARROW_COUNTER_BITS, format_rate, parse_rate
from nvwatch.sim.fault_window import end_faults
from nvwatch.sim.profiles import Nic
from nvwatch.sim.workload import Workload

# Link flap cycle: up for FLAP_PERIOD_S - FLAP_DOWN_S, then down (Polling) for
# FLAP_DOWN_S, starting FLAP_PERIOD_S - FLAP_DOWN_S after the scenario begins.
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
# Payload a fully busy link carries, as a share of its rate: headers and flow control take
# the rest (ib_write_bw reaches ~96-97 % of an EDR or HDR link); never more than the rate
PEAK_PAYLOAD_SHARE = (0.95, 0.97)
# Spans at least this long, with no link flap in them, integrate the workload exactly
# (a month of history steps minutes at a time; 8 samples a second would cost thousands
# of samples per port per step).
EXACT_ACTIVITY_MIN_S = 120.0

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


@dataclass
class PortFault:
    """One scenario on one port, active over [since, until) on the fabric's clock."""

    name: str
    since: float
    until: float = math.inf
    # ib-congestion: the share of the port's throughput the congestion takes (None:
    # 1 - CONGESTED_THROUGHPUT)
    slowdown: float | None = None

    def active(self, t: float) -> bool:
        return self.since <= t < self.until


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


class SimulatedPort:
    """One simulated HCA port (mlx5 NICs in the profiles have one port each)."""

    def __init__(self, nic: Nic, workload: Workload, seed: int) -> None:
        self.nic = nic
        self.workload = workload
        self.faults: list[PortFault] = []
        self.rng = random.Random(f"{seed}:{nic.device}")
        # the rate text and bytes/s, healthy (False) and trained down (True)
        self._rates = {False: nic.rate, True: degraded_rate(nic.rate)}
        self._rate_bytes = {k: parse_rate(v).bytes_per_second for k, v in self._rates.items()}
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
        # False: the narrow counters count on past their width, as if an operator cleared
        # them before they filled (a month of history would otherwise show port_xmit_wait
        # saturated within hours and no congestion after); True is the IBA's behaviour
        self.saturating = True

    # --- scenarios ---------------------------------------------------------------------

    def active(self, name: str, t: float) -> bool:
        return any(f.name == name and f.active(t) for f in self.faults)

    def running(self, now: float) -> list[str]:
        """Scenarios on this port that have not ended (begun or still to begin)."""
        return [f.name for f in self.faults if f.until > now]

    def end(self, name: str | None, now: float) -> list[str]:
        """End the scenarios named `name` (None: all) at `now`; one not begun never will."""
        return end_faults(self.faults, name, now)

    def present(self, t: float) -> bool:
        """False while the HCA's driver is unloaded (ib-hca-vanish)."""
        return not self.active("ib-hca-vanish", t)

    def rate_text(self, t: float) -> str:
        return self._rates[self.active("ib-degraded", t)]

    def throughput(self, t: float) -> float:
        """Payload bytes/s the port moves at `t` when fully busy, before the share
        headers take: its trained rate, times what congestion leaves (the worst one)."""
        congested = [
            CONGESTED_THROUGHPUT if f.slowdown is None else 1.0 - f.slowdown
            for f in self.faults
            if f.name == "ib-congestion" and f.active(t)
        ]
        rate = self._rate_bytes[self.active("ib-degraded", t)]
        return rate * (min(congested) if congested else 1.0)

    def throughput_share(self, t: float) -> float:
        """Share of its healthy throughput the port has at `t` (sim/job/)."""
        return self.throughput(t) / self._rate_bytes[False]

    # --- time-driven state -------------------------------------------------------------

    def _flaps_by(self, t: float) -> int:
        """Down spells begun by t, over every ib-link-flap scenario's window."""
        first_down = FLAP_PERIOD_S - FLAP_DOWN_S
        total = 0
        for fault in self.faults:
            if fault.name != "ib-link-flap":
                continue
            elapsed = min(t, fault.until) - fault.since
            if elapsed >= first_down:
                total += math.floor((elapsed - first_down) / FLAP_PERIOD_S) + 1
        return total

    def is_up(self, t: float) -> bool:
        """Down in the down part of a running ib-link-flap cycle, up otherwise."""
        down_from = FLAP_PERIOD_S - FLAP_DOWN_S
        return not any(
            f.name == "ib-link-flap" and f.active(t) and (t - f.since) % FLAP_PERIOD_S >= down_from
            for f in self.faults
        )

    def integrate(self, t0: float, t1: float) -> None:
        # cut at every scenario's start and end, so each piece has one set of faults
        cuts = sorted({t for f in self.faults for t in (f.since, f.until) if t0 < t < t1})
        for start, end in zip([t0, *cuts], [*cuts, t1], strict=True):
            busy, up_time = self._activity(start, end)
            middle = (start + end) / 2
            self._add_traffic(busy, up_time, middle)
            self._add_faults(start, end, middle)
        if not self.saturating:
            return
        for name, bits in NARROW_COUNTER_BITS.items():
            # The hardware saturates these instead of wrapping.
            self.counters[name] = min(self.counters[name], float((1 << bits) - 1))

    def _activity(self, t0: float, t1: float) -> tuple[float, float]:
        """(busy, up) seconds in [t0, t1): busy weighs up time by the workload's
        communication intensity, so all-reduce bursts move data and idle time does not."""
        elapsed = t1 - t0
        exact = elapsed >= EXACT_ACTIVITY_MIN_S or self.workload.exact_means
        if exact and not self._flapping_within(t0, t1):
            return self.workload.comm_integral(t0, t1), elapsed
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

    def _flapping_within(self, t0: float, t1: float) -> bool:
        return any(f.name == "ib-link-flap" and f.since < t1 and f.until > t0 for f in self.faults)

    def _add_traffic(self, busy: float, up_time: float, t: float) -> None:
        congested = self.active("ib-congestion", t)
        throughput = self.throughput(t)
        background = self.background_bytes_per_second * up_time
        c = self.counters
        for direction in ("xmit", "rcv"):
            payload = throughput * busy * self.rng.uniform(*PEAK_PAYLOAD_SHARE)
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

    def _add_faults(self, t0: float, t1: float, t: float) -> None:
        c = self.counters
        new_flaps = self._flaps_by(t1) - self._flaps_by(t0)
        if new_flaps > 0:
            c["link_downed"] += new_flaps
            c["symbol_error"] += 40 * new_flaps  # the retrain that follows a flap
            self.hw["local_ack_timeout_err"] += 3 * new_flaps
        if self.active("ib-symbol-errors", t):
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
            "rate": self.rate_text(t),
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
