"""InfinibandSample -> nvwatch_ib_* families (names and labels from the catalogue).

Absent values stay absent: a counter the port did not answer has no series this poll
rather than a 0 that would make rate() see a reset. Byte counters are the sysfs 4-octet
word counts x 4. Values are ints up to 2^64 in the sample; the exposition is float64
like all Prometheus samples, exact up to 2^53.
"""

from __future__ import annotations

from agent.exposition.families import FamilySet
from agent.sources.infiniband import InfinibandPort, InfinibandSample


def render(sample: InfinibandSample, out: FamilySet) -> None:
    for device in sample.devices:
        out.add(
            "nvwatch_ib_info",
            {
                "device": device.name,
                "board_id": device.board_id or "",
                "firmware_version": device.firmware_version or "",
                "hca_type": device.hca_type or "",
                "node_guid": device.node_guid or "",
            },
            1,
        )
        for port in device.ports:
            _render_port(port, out)
    # Declared even with no narrow counters so the family's HELP is always there for
    # alert rules that use it.
    out.declare("nvwatch_ib_port_reading_saturated")


def _render_port(port: InfinibandPort, out: FamilySet) -> None:
    labels = {"device": port.device, "port": port.port}
    out.add(
        "nvwatch_ib_port_info",
        {
            **labels,
            "link_layer": port.link_layer or "",
            "nearest_gpus": ",".join(str(gpu) for gpu in port.nearest_gpus),
        },
        1,
    )
    out.add("nvwatch_ib_port_state", labels, port.state)
    out.add("nvwatch_ib_port_physical_state", labels, port.physical_state)
    out.add("nvwatch_ib_port_rate_bytes_per_second", labels, port.rate_bytes_per_second)
    out.add("nvwatch_ib_port_transmit_bytes_total", labels, port.transmit_bytes)
    out.add("nvwatch_ib_port_receive_bytes_total", labels, port.receive_bytes)
    out.add(
        "nvwatch_ib_port_transmit_packets_total",
        labels,
        port.counters.get("port_xmit_packets"),
    )
    out.add(
        "nvwatch_ib_port_receive_packets_total",
        labels,
        port.counters.get("port_rcv_packets"),
    )
    out.add("nvwatch_ib_port_transmit_wait_total", labels, port.counters.get("port_xmit_wait"))
    for error_type, value in port.errors.items():
        out.add("nvwatch_ib_port_errors_total", {**labels, "type": error_type}, value)
    for counter, value in sorted(port.hw_counters.items()):
        out.add("nvwatch_ib_port_hw_events_total", {**labels, "counter": counter}, value)
    for counter, saturated in port.saturated.items():
        out.add(
            "nvwatch_ib_port_reading_saturated",
            {**labels, "counter": counter},
            1 if saturated else 0,
        )
