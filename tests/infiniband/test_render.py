"""render(): InfinibandSample -> nvwatch_ib_* text, parsed back with prometheus_client."""

from __future__ import annotations

from pathlib import Path

from nvwatch.agent.catalogue import CATALOGUE
from nvwatch.agent.sources.infiniband import InfinibandSample, InfinibandSource
from nvwatch.sim.clock import ManualClock
from nvwatch.sim.fabric.fabric import SimulatedFabric

from .exposition import scrape, value
from .sysfs_tree import add_device, add_pci_device, healthy_port, link_hca

SATURATED = "nvwatch_ib_port_reading_saturated"


def test_render_exact_values(tmp_path: Path) -> None:
    big = (1 << 40) + 1
    hca = ("pci0000:00", "0000:00:01.0", "0000:10:00.0", "0000:11:02.0", "0000:14:00.0")
    gpus = [
        ("pci0000:00", "0000:00:01.0", "0000:10:00.0", f"0000:11:0{i}.0", f"0000:1{2 + i}:00.0")
        for i in range(2)
    ]
    for gpu in gpus:
        add_pci_device(tmp_path, gpu)
    link_hca(tmp_path, "mlx5_0", hca)
    add_device(
        tmp_path,
        "mlx5_0",
        ports={
            "1": healthy_port(
                **{
                    "counters/port_xmit_data": f"{big}\n",
                    "counters/port_rcv_data": "N/A (no PMA)\n",
                    "counters/symbol_error": "65535\n",
                    "counters/port_xmit_wait": "4294967294\n",
                    "counters/VL15_dropped": "garbage\n",
                }
            )
        },
    )
    bus_ids = ["0000" + g[-1] for g in gpus]
    text, samples = scrape(InfinibandSource(tmp_path, gpu_bus_ids=lambda: bus_ids).collect())
    port = {"device": "mlx5_0", "port": "1"}
    assert (
        value(
            samples,
            "nvwatch_ib_info",
            device="mlx5_0",
            board_id="MT_2180110032",
            firmware_version="12.28.2006",
            hca_type="MT4115",
            node_guid="0c42:a103:0001:0203",
        )
        == 1
    )
    assert (
        value(samples, "nvwatch_ib_port_info", **port, link_layer="InfiniBand", nearest_gpus="0,1")
        == 1
    )
    assert value(samples, "nvwatch_ib_port_state", **port) == 4
    assert value(samples, "nvwatch_ib_port_physical_state", **port) == 5
    assert value(samples, "nvwatch_ib_port_rate_bytes_per_second", **port) == 12_500_000_000
    # 4 x (2^40 + 1) = 2^42 + 4 is exact in float64
    assert value(samples, "nvwatch_ib_port_transmit_bytes_total", **port) == 4 * big
    assert value(samples, "nvwatch_ib_port_receive_bytes_total", **port) is None  # no PMA
    assert "nvwatch_ib_port_receive_bytes_total" not in text
    assert value(samples, "nvwatch_ib_port_transmit_packets_total", **port) == 30
    assert value(samples, "nvwatch_ib_port_receive_packets_total", **port) == 40
    assert value(samples, "nvwatch_ib_port_transmit_wait_total", **port) == 4294967294
    assert value(samples, "nvwatch_ib_port_errors_total", **port, type="symbol") == 65535
    assert value(samples, "nvwatch_ib_port_errors_total", **port, type="link_downed") == 2
    assert value(samples, "nvwatch_ib_port_errors_total", **port, type="vl15_dropped") is None
    assert (
        value(samples, "nvwatch_ib_port_hw_events_total", **port, counter="local_ack_timeout_err")
        == 5
    )
    assert value(samples, "nvwatch_ib_port_hw_events_total", **port, counter="lifespan") is None
    saturated = SATURATED
    assert value(samples, saturated, **port, counter="symbol_error") == 1
    # a counter below its maximum has no series (one below all-ones, and 2 of 255)
    assert value(samples, saturated, **port, counter="port_xmit_wait") is None
    assert value(samples, saturated, **port, counter="link_downed") is None
    flagged = [dict(labels)["counter"] for name, labels in samples if name == saturated]
    assert flagged == ["symbol_error"]
    assert value(samples, saturated, **port, counter="VL15_dropped") is None  # unreadable


def test_render_without_gpu_ids_has_empty_nearest_label(tmp_path: Path) -> None:
    add_device(tmp_path, "mlx5_0", ports={"1": healthy_port()})
    _, samples = scrape(InfinibandSource(tmp_path).collect())
    labels = {"device": "mlx5_0", "port": "1", "link_layer": "InfiniBand", "nearest_gpus": ""}
    assert value(samples, "nvwatch_ib_port_info", **labels) == 1


def test_render_empty_sample_declares_saturation_family() -> None:
    text, samples = scrape(InfinibandSample(devices=()))
    assert samples == {}
    assert "# TYPE nvwatch_ib_port_reading_saturated gauge" in text


def test_simulated_node_renders_every_ib_family(tmp_path: Path) -> None:
    fabric = SimulatedFabric("dgx-a100", tmp_path, clock=ManualClock())
    fabric.tick()
    text, samples = scrape(InfinibandSource(tmp_path, gpu_bus_ids=fabric.gpu_bus_ids).collect())
    rendered = {name for name, _ in samples}
    # a healthy fabric pins no counter: the saturation family is declared, without series
    assert SATURATED not in rendered
    assert f"# TYPE {SATURATED} gauge" in text
    for spec in CATALOGUE:
        if spec.source != "infiniband" or spec.name == SATURATED:
            continue
        # counters are exposed with the _total suffix
        assert spec.name in rendered, spec.name
        assert f"# HELP {spec.name.removesuffix('_total')}" in text
    info = [labels for name, labels in samples if name == "nvwatch_ib_port_info"]
    assert len(info) == 8
    assert {dict(labels)["nearest_gpus"] for labels in info} == {"0,1", "2,3", "4,5", "6,7"}
