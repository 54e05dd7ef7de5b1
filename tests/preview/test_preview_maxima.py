"""The preview's check of every figure against the hardware's published maximum.

The maxima below are written from NVIDIA's datasheets (the shared hardware facts), not
read from the module's table: a V100 SXM2 has 6 NVLink2 links of 25 GB/s per direction
(150 GB/s), a board power of 300 W, and sits in a DGX-2 at 10 kW for 16 GPUs at most;
an EDR port carries 100 Gb/s (12.5 GB/s) per direction; PCIe Gen3 x16 15.75 GB/s.
"""

from __future__ import annotations

from typing import Any

import pytest

from nvwatch.dashboards.preview_maxima import Drawn, Fleet, beyond_maxima
from nvwatch.dashboards.preview_panels import Series

V100 = "Tesla V100-SXM2-16GB"
T4 = "Tesla T4"
EDR_BYTES = 100e9 / 8


class FakePrometheus:
    """Two V100 nodes (two GPUs each, one EDR port each) and a T4 node; job 7 holds
    dgx-0's GPU 1 and dgx-1's GPU 0."""

    def instant(self, expr: str, at: float) -> list[dict[str, Any]]:
        if expr == "nvwatch_gpu_info":
            gpus = [("dgx-0", "0", V100), ("dgx-0", "1", V100), ("dgx-1", "0", V100),
                    ("dgx-1", "1", V100), ("t4-0", "0", T4)]  # fmt: skip
            return [
                {"metric": {"instance": i, "gpu": g, "name": n, "rack": "r1"}, "value": [at, "1"]}
                for i, g, n in gpus
            ]
        if expr == "nvwatch_gpu_allocation_info":
            return [
                {"metric": {"instance": i, "gpu": g, "job_id": "7"}, "value": [at, "1"]}
                for i, g in (("dgx-0", "1"), ("dgx-1", "0"))
            ]
        if expr == "nvwatch_ib_port_rate_bytes_per_second":
            return [
                {"metric": {"instance": i, "device": "mlx5_0", "port": "1"},
                 "value": [at, repr(EDR_BYTES)]}
                for i in ("dgx-0", "dgx-1")
            ]  # fmt: skip
        raise AssertionError(f"unexpected query {expr}")


@pytest.fixture(scope="module")
def fleet() -> Fleet:
    return Fleet.read(FakePrometheus(), 1000.0)


def _drawn(expr: str, unit: str, labels: dict[str, str], value: float) -> Drawn:
    return Drawn("d.json", "panel", unit, expr, Series("s", labels, [(0.0, 0.0), (1.0, value)]))


def _beyond(fleet: Fleet, expr: str, unit: str, labels: dict[str, str], value: float,
            range_s: float = 300.0) -> list[float]:  # fmt: skip
    return [b.maximum for b in beyond_maxima([_drawn(expr, unit, labels, value)], fleet, range_s)]


NVLINK_TX = "sum by (instance, gpu) (rate(nvwatch_nvlink_transmit_bytes_total[1m]))"
NVLINK_BOTH = (
    "sum by (instance, gpu) (rate(nvwatch_nvlink_transmit_bytes_total[1m]) + "
    "rate(nvwatch_nvlink_receive_bytes_total[1m]))"
)


def test_one_v100_sending_780_gb_s_over_nvlink_is_beyond_its_150(fleet: Fleet) -> None:
    gpu = {"instance": "dgx-0", "gpu": "0"}
    assert _beyond(fleet, NVLINK_TX, "Bps", gpu, 780e9) == [pytest.approx(150e9)]
    assert _beyond(fleet, NVLINK_TX, "Bps", gpu, 140e9) == []
    # both directions read: twice the maximum, so 280 GB/s is possible and 780 is not
    assert _beyond(fleet, NVLINK_BOTH, "Bps", gpu, 280e9) == []
    assert _beyond(fleet, NVLINK_BOTH, "Bps", gpu, 780e9) == [pytest.approx(300e9)]


def test_one_link_a_node_a_job_and_the_fleet_are_bounded_by_their_own_devices(
    fleet: Fleet,
) -> None:
    link = {"instance": "dgx-0", "gpu": "0", "link": "3"}
    assert _beyond(fleet, NVLINK_TX, "Bps", link, 30e9) == [pytest.approx(25e9)]
    node = {"instance": "dgx-0"}
    assert _beyond(fleet, NVLINK_TX, "Bps", node, 290e9) == []
    assert _beyond(fleet, NVLINK_TX, "Bps", node, 400e9) == [pytest.approx(300e9)]
    job = {"job_id": "7"}
    assert _beyond(fleet, NVLINK_TX, "Bps", job, 400e9) == [pytest.approx(300e9)]
    # a T4 has no NVLink: any NVLink traffic on its node is beyond the hardware
    assert _beyond(fleet, NVLINK_TX, "Bps", {"instance": "t4-0"}, 1.0) == [0.0]
    # the whole fleet: 4 V100s
    assert _beyond(fleet, NVLINK_TX, "Bps", {}, 700e9) == [pytest.approx(600e9)]


def test_infiniband_ports_and_a_jobs_nodes(fleet: Fleet) -> None:
    expr = "sum by (instance, device, port) (rate(nvwatch_ib_port_transmit_bytes_total[1m]))"
    port = {"instance": "dgx-0", "device": "mlx5_0", "port": "1"}
    assert _beyond(fleet, expr, "Bps", port, 12e9) == []
    assert _beyond(fleet, expr, "Bps", port, 125e9) == [pytest.approx(EDR_BYTES)]
    both = "nvwatch_ib_port_receive_bytes:rate + nvwatch_ib_port_transmit_bytes:rate"
    # the job's GPUs are on both nodes: their two ports, both directions
    assert _beyond(fleet, both, "Bps", {"job_id": "7"}, 60e9) == [pytest.approx(4 * EDR_BYTES)]


def test_pcie_power_energy_gpu_hours_and_ratios(fleet: Fleet) -> None:
    gpu = {"instance": "dgx-0", "gpu": "1"}
    pcie = "nvwatch_gpu_pcie_throughput_bytes_per_second"
    assert _beyond(fleet, pcie, "Bps", {**gpu, "direction": "tx"}, 20e9) == [
        pytest.approx(15.75e9, rel=1e-3)
    ]
    assert _beyond(fleet, "nvwatch_gpu_power_watts", "watt", gpu, 310.0) == []  # within 5 %
    assert _beyond(fleet, "nvwatch_gpu_power_watts", "watt", gpu, 400.0) == [300.0]
    node = {"instance": "dgx-0"}
    assert _beyond(fleet, "nvwatch_bmc_power_watts:max", "watt", node, 1400.0) == [1250.0]
    # 5 minutes of 4 V100s at 300 W is 0.1 kWh
    gpu_kwh = "sum(increase(nvwatch_gpu_energy_joules_total[5m])) / 3.6e6"
    assert _beyond(fleet, gpu_kwh, "kwatth", {"rack": "r1"}, 0.5, range_s=300.0) == [
        pytest.approx(0.1 + 70 * 300 / 3.6e6)  # the rack's T4 too
    ]
    assert _beyond(fleet, "sum(nvwatch_gpu_busy:sum)", "h", {"user": "a"}, 2.0, 3600.0) == []
    assert _beyond(fleet, "sum(nvwatch_gpu_busy:sum)", "h", {"user": "a"}, 6.0, 3600.0) == [5.0]
    assert _beyond(fleet, "nvwatch_gpu_utilization_ratio", "percentunit", gpu, 1.2) == [1.0]


def test_unbounded_quantities_and_unknown_scopes_are_left_alone(fleet: Fleet) -> None:
    assert _beyond(fleet, "rate(nvwatch_nvlink_errors_total[1m])", "cps", {}, 1e12) == []
    assert _beyond(fleet, "nvwatch_gpu_temperature_celsius", "celsius", {}, 500.0) == []
    # the Slurm controller's series: no GPU of its own
    assert _beyond(fleet, "nvwatch_gpu_busy:sum", "h", {"instance": "slurmctld"}, 1e9) == []


def test_a_finding_is_one_line_naming_the_panel_and_both_figures(fleet: Fleet) -> None:
    drawn = _drawn(NVLINK_TX, "Bps", {"instance": "dgx-0", "gpu": "0"}, 780e9)
    (finding,) = beyond_maxima([drawn], fleet, 300.0)
    assert finding.line() == (
        "d.json: panel 'panel', s: NVLink bytes/s 7.8e+11 above the hardware's maximum 1.5e+11"
    )


THROTTLE = "rate(nvwatch_gpu_throttle_seconds_total[8s])"


def _late_poll_rate() -> float:
    """What Prometheus' rate() reads over 8 s of 2 s scrapes of a GPU throttled all the
    time, when one poll ran late: the scrape at 0 s still served the poll before (-2 s of
    counter), the ones at 2, 4 and 6 s each the poll just before them."""
    samples = [(0.0, -2.0), (2.0, 2.0), (4.0, 4.0), (6.0, 6.0)]
    (t0, v0), (t1, v1) = samples[0], samples[-1]
    return (v1 - v0) / (t1 - t0)  # extrapolated to the window's ends: the same ratio


def test_a_late_poll_may_lift_a_rate_by_one_poll_over_its_window(fleet: Fleet) -> None:
    gpu = {"instance": "dgx-0", "gpu": "0"}
    late = _late_poll_rate()
    assert late == pytest.approx(4 / 3)
    sampled = _drawn(THROTTLE, "s", gpu, late)
    # without the scrape interval a share above one GPU's second per second is beyond it
    assert [b.maximum for b in beyond_maxima([sampled], fleet, 300.0)] == [1.0]
    assert beyond_maxima([sampled], fleet, 300.0, scrape_s=2.0) == []
    # two late polls are more than polling explains; so is one over a minute's window
    assert beyond_maxima([_drawn(THROTTLE, "s", gpu, 1.6)], fleet, 300.0, scrape_s=2.0)
    minute = THROTTLE.replace("[8s]", "[1m]")
    assert beyond_maxima([_drawn(minute, "s", gpu, late)], fleet, 300.0, scrape_s=2.0)
    # a gauge is served as polled: no slack
    assert beyond_maxima([_drawn("nvwatch_gpu_power_watts", "watt", gpu, 400.0)], fleet, 300.0,
                         scrape_s=2.0)  # fmt: skip
