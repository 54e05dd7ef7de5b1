"""PCI bus ids: the one parser every part of the agent uses to compare or look them up.

NVML writes a GPU's bus id as "00000000:3B:00.0" (nvmlPciInfo_t.busId: an 8-hex-digit
domain, upper case) and, in busIdLegacy, with a 4-digit domain. Linux names the device
in sysfs with the domain printed by "%04x", so the domain keeps every digit it needs:
"0000:3b:00.0", and "10000:3b:00.0" under a VMD controller (domains from 0x10000 up).
Cutting NVML's domain to its last four digits would turn that VMD GPU into the domain-0
device 0000:3b:00.0, a different device or none.
"""

from __future__ import annotations

import functools
import re

# domain (optional, up to NVML's 8 hex digits) : bus (8 bits) : device (5 bits) . function
_BUS_ID = re.compile(
    r"(?:(?P<domain>[0-9a-f]{1,8}):)?(?P<bus>[0-9a-f]{2}):(?P<device>[0-9a-f]{2})"
    r"\.(?P<function>[0-7])",
    re.IGNORECASE,
)
_MAX_DEVICE = 0x1F


@functools.lru_cache(maxsize=1024)  # the same few dozen ids every poll (NVLink peers)
def sysfs_bus_id(bus_id: str) -> str:
    """The sysfs name ("0000:3b:00.0", "10000:3b:00.0") of an NVML, legacy or sysfs id.

    Accepts an 8-digit (NVML), 4-digit (legacy, sysfs) or any 1-8 digit domain, none
    (domain 0: "3b:00.0"), upper or lower case, and surrounding whitespace. Raises
    ValueError on anything else.
    """
    match = _BUS_ID.fullmatch(bus_id.strip())
    device = int(match.group("device"), 16) if match else 0
    if match is None or device > _MAX_DEVICE:
        raise ValueError(f"not a PCI bus id (domain:bus:device.function): {bus_id!r}")
    domain = int(match.group("domain") or "0", 16)
    bus = int(match.group("bus"), 16)
    function = int(match.group("function"))
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function:x}"
