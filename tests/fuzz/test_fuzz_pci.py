"""Fuzz the PCI bus id parser: ValueError or a canonical sysfs name, nothing else."""

from __future__ import annotations

import re

from hypothesis import given

from nvwatch.agent.sources.pci_address import sysfs_bus_id

from .strategies import FUZZ, near

BUS_IDS = near(["00000000:3B:00.0", "0000:3b:00.0", "10000:3b:00.0", "3b:00.0", " 0000:AF:1f.7 "])
SYSFS_NAME = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[01][0-9a-f]\.[0-7]")


@FUZZ
@given(BUS_IDS)
def test_sysfs_bus_id(text: str) -> None:
    try:
        name = sysfs_bus_id(text)
    except ValueError:
        return
    assert SYSFS_NAME.fullmatch(name), name
    assert sysfs_bus_id(name) == name  # canonical: parsing its own output changes nothing
