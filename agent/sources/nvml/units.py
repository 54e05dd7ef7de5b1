"""NVML's units, and the conversions into the base units the samples carry.

NVML answers in integers of its own units (mW, mJ, MHz, percent, KiB, ns); samples hold
watts, joules, hertz, ratios, bytes and seconds. Every scale factor the source applies
is here, each with the reason for its value.
"""

from __future__ import annotations

from nvwatch.agent.sources.nvml.device import plain_number

MHZ = 1_000_000
#: NVML's "KB" in nvmlDeviceGetPcieThroughput is KiB: the NVLink throughput fields of the
#: same header say KiB explicitly, and nvitop/DCGM scale both by 1024.
KIB = 1024
#: NVML_FI_DEV_NVLINK_GET_SPEED is in MBps, decimal like NVIDIA's link rates (25781 MBps
#: on an NVLink2 link is the "25 GB/s" of the datasheet).
MBPS = 1_000_000
NS_PER_S = 1e9


def percent(value: object) -> float | None:
    """NVML percent -> ratio, never above 1."""
    number = plain_number(value)
    return min(number / 100.0, 1.0) if number is not None else None


def milli(value: object) -> float | None:
    """mW -> W, mJ -> J."""
    number = plain_number(value)
    return number / 1000.0 if number is not None else None


def mhz(value: object) -> float | None:
    number = plain_number(value)
    return number * MHZ if number is not None else None


def kib(value: object) -> float | None:
    number = plain_number(value)
    return number * KIB if number is not None else None


def int_or_none(value: float | None) -> int | None:
    return int(value) if value is not None else None
