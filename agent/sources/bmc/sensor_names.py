"""Names for IPMI's numbers: sensor types (the `type` label) and entities (`entity`).

Data tables only. Sensor types are named as FreeIPMI's libipmimonitoring names them
(IPMI 2.0 table 42-3), which is what ipmi_exporter puts in its `type` label, so a site
moving over keeps its values. Entities (IPMI 2.0 table 43-13, DCMI 1.5 table 6-3) are
folded into the few an operator asks about: is the air at the inlet hot, a CPU, the
board; the rest are "other", so the label stays small whatever a vendor reports.
"""

from __future__ import annotations

_SENSOR_TYPES = (
    "Reserved",
    "Temperature",
    "Voltage",
    "Current",
    "Fan",
    "Physical Security",
    "Platform Security Violation Attempt",
    "Processor",
    "Power Supply",
    "Power Unit",
    "Cooling Device",
    "Other Units Based Sensor",
    "Memory",
    "Drive Slot",
    "POST Memory Resize",
    "System Firmware Progress",
    "Event Logging Disabled",
    "Watchdog 1",
    "System Event",
    "Critical Interrupt",
    "Button/Switch",
    "Module/Board",
    "Microcontroller/Coprocessor",
    "Add In Card",
    "Chassis",
    "Chip Set",
    "Other Fru",
    "Cable/Interconnect",
    "Terminator",
    "System Boot Initiated",
    "Boot Error",
    "OS Boot",
    "OS Critical Stop",
    "Slot/Connector",
    "System ACPI Power State",
    "Watchdog 2",
    "Platform Alert",
    "Entity Presence",
    "Monitor ASIC/IC",
    "LAN",
    "Management Subsystem Health",
    "Battery",
    "Session Audit",
    "Version Change",
    "FRU State",
)
_OEM_TYPES = 0xC0  # 0xC0-0xFF: OEM reserved


def sensor_type_name(code: int) -> str:
    """The sensor type code's name, "OEM Reserved" for the OEM range."""
    if 0 <= code < len(_SENSOR_TYPES):
        return _SENSOR_TYPES[code]
    return "OEM Reserved" if code >= _OEM_TYPES else "Unrecognized"


ENTITY_NAMES: dict[int, str] = {
    0x37: "inlet",  # air inlet
    0x40: "inlet",  # DCMI: air inlet
    0x03: "cpu",  # processor
    0x41: "cpu",  # DCMI: processor
    0x07: "board",  # system board
    0x42: "board",  # DCMI: baseboard
    0x08: "memory",  # memory module
    0x20: "memory",  # memory device
    0x0A: "power_supply",
    0x14: "power_supply",  # power module / DC-to-DC converter
    0x0B: "add_in_card",  # where many BMCs put GPUs and NICs
    0x04: "disk",  # disk or disk bay
    0x1A: "disk",  # disk drive bay
    0x17: "chassis",  # system chassis
}
