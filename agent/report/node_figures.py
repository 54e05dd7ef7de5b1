"""What the report judges BMC readings against: each node class's inlet air envelope.

Data table and two look-ups. The operating inlet range is the system's own (its user
guide; the DGX-1's is in its white paper), so a rack is too warm for the class it holds,
not against one figure for the room. A class without a figure here gets percentiles but
no judgement.
"""

from __future__ import annotations

# Highest operating inlet air temperature, °C, per node class (= simulation profile).
# "~": a figure to check against the guide of the exact model before relying on it.
INLET_MAX_CELSIUS: dict[str, float] = {
    "dgx1-p100": 35.0,  # DGX-1 white paper: inlet air 5-35 °C
    "dgx1-v100": 35.0,  # DGX-1 white paper: inlet air 5-35 °C
    "dgx-station": 30.0,  # ~ DGX Station user guide: 10-30 °C
    "dgx2": 35.0,  # ~ DGX-2 user guide: 5-35 °C
    "dgx-a100": 30.0,  # ~ DGX A100 user guide: 5-30 °C
    "dgx-h100": 30.0,  # ~ DGX H100 user guide: 5-30 °C
    "hgx-h200": 30.0,  # ~ as the DGX H200, whose chassis is the DGX H100's
}

# A fan reading below this is a stopped fan: a DGX chassis fan turns thousands of rpm
# even idle, and a BMC reads a seized or unplugged one as 0 or a few hundred.
FAN_STOPPED_RPM = 500.0


def inlet_max_celsius(node_class: str) -> float | None:
    """The class's operating inlet maximum; None where the report knows none."""
    return INLET_MAX_CELSIUS.get(node_class)
