"""Node classes: what a healthy node of each class looks like, and the published figures
of the systems nvwatch knows (the mixin config's `node_classes` replaces the table)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nvwatch.common.yaml_safe import key_text


@dataclass(frozen=True)
class NodeClass:
    """What a healthy node of one class looks like; `node_class` comes from file_sd labels."""

    name: str
    # GPUs nvml should enumerate; fewer up means a GPU fell off the bus or was never seen.
    gpus: int
    # Active NVLink links per GPU (0: no NVLink on this class, nothing to expect).
    nvlinks_per_gpu: int
    # RDMA ports under /sys/class/infiniband (compute fabric plus any RoCE NIC).
    ib_ports: int
    # Nominal port rate; None where the class has no RDMA fabric to compare against.
    ib_rate_bytes_per_second: float | None
    # --- the node around the GPUs, as its BMC reports it (None or 0: not known, so
    # nothing to compare with and no alert for the class)
    # Highest operating inlet air temperature, °C, from the system's user guide.
    inlet_max_celsius: float | None = None
    # The whole system's maximum power draw, W (GPUs, CPUs, fans, NICs, drives).
    max_power_watts: float | None = None
    # Power supplies installed, and how many of them may fail with the node still
    # powered at full load (N+R: R of N+R).
    power_supplies: int = 0
    power_supplies_redundant: int = 0

    @property
    def power_supplies_for_redundancy(self) -> int | None:
        """Healthy supplies the node needs to still have a spare: N+1 of an N+R design.

        One fewer and the next failure takes the node below full power; None for a class
        built without redundancy (nothing to lose) or whose supplies are not known.
        """
        if self.power_supplies <= 0 or self.power_supplies_redundant <= 0:
            return None
        return self.power_supplies - self.power_supplies_redundant + 1


def gbps(gigabits: float) -> float:
    # sysfs `rate` Gb/s to bytes/s, the same conversion the agent and node_exporter use.
    return gigabits * 125_000_000


# Figures of the simulated systems (sim/profiles.py: public datasheets). The node figures
# (inlet air, system power, power supplies) are from NVIDIA's DGX user guides and, for
# the DGX-1, its white paper; "~" marks a figure to check against the guide of the exact
# model before relying on it (node_classes in the mixin config replaces the table).
DEFAULT_NODE_CLASSES: tuple[NodeClass, ...] = (
    NodeClass(
        "dgx1-p100", gpus=8, nvlinks_per_gpu=4, ib_ports=4, ib_rate_bytes_per_second=gbps(100),
        inlet_max_celsius=35.0,  # DGX-1 white paper: inlet air 5-35 °C
        max_power_watts=3200.0,  # DGX-1 white paper: 3.2 kW TDP
        power_supplies=4, power_supplies_redundant=1,  # ~ DGX-1 guide: 4 x 1,600 W, 3+1
    ),
    NodeClass(
        "dgx1-v100", gpus=8, nvlinks_per_gpu=6, ib_ports=4, ib_rate_bytes_per_second=gbps(100),
        inlet_max_celsius=35.0,  # DGX-1 white paper: inlet air 5-35 °C
        max_power_watts=3500.0,  # DGX-1 (V100) guide: 3.5 kW
        power_supplies=4, power_supplies_redundant=1,  # ~ DGX-1 guide: 4 x 1,600 W, 3+1
    ),
    NodeClass(
        "dgx-station", gpus=4, nvlinks_per_gpu=6, ib_ports=0, ib_rate_bytes_per_second=None,
        inlet_max_celsius=30.0,  # ~ DGX Station guide: 10-30 °C
        max_power_watts=1500.0,  # DGX Station guide: 1.5 kW
        power_supplies=1,  # ~ one supply, no redundancy to lose
    ),
    NodeClass(
        "dgx2", gpus=16, nvlinks_per_gpu=6, ib_ports=8, ib_rate_bytes_per_second=gbps(100),
        inlet_max_celsius=35.0,  # ~ DGX-2 guide: 5-35 °C
        max_power_watts=10000.0,  # DGX-2 guide: 10 kW
        # ~ 6 x 3,000 W; the guide's redundancy is not in our sources: no redundancy alert
        power_supplies=6,
    ),
    NodeClass(
        "dgx-a100", gpus=8, nvlinks_per_gpu=12, ib_ports=8, ib_rate_bytes_per_second=gbps(200),
        inlet_max_celsius=30.0,  # ~ DGX A100 guide: 5-30 °C
        max_power_watts=6500.0,  # DGX A100 guide: 6.5 kW
        power_supplies=6, power_supplies_redundant=3,  # ~ 6 x 3,000 W, 3+3
    ),
    NodeClass(
        "dgx-h100", gpus=8, nvlinks_per_gpu=18, ib_ports=8, ib_rate_bytes_per_second=gbps(400),
        inlet_max_celsius=30.0,  # ~ DGX H100 guide: 5-30 °C
        max_power_watts=10200.0,  # DGX H100 guide: 10.2 kW
        power_supplies=6, power_supplies_redundant=2,  # ~ 6 x 3,300 W, 4+2
    ),
    NodeClass(
        "hgx-h200", gpus=8, nvlinks_per_gpu=18, ib_ports=8, ib_rate_bytes_per_second=gbps(400),
        # ~ as the DGX H200, whose chassis is the DGX H100's
        inlet_max_celsius=30.0,
        max_power_watts=10200.0,
        power_supplies=6, power_supplies_redundant=2,
    ),
    NodeClass(
        "geforce-workstation", gpus=4, nvlinks_per_gpu=0, ib_ports=0, ib_rate_bytes_per_second=None,
        max_power_watts=1200.0,  # ~ 1.2 kW; no published inlet range or supplies
    ),
    NodeClass(
        "inference-t4", gpus=4, nvlinks_per_gpu=0, ib_ports=1, ib_rate_bytes_per_second=gbps(25),
        max_power_watts=600.0,  # ~ 0.6 kW; the server's vendor sets inlet and supplies
    ),
)  # fmt: skip


_NODE_CLASS_KEYS = (
    "gpus",
    "nvlinks_per_gpu",
    "ib_ports",
    "ib_rate_gbps",
    "inlet_max_celsius",
    "max_power_watts",
    "power_supplies",
    "power_supplies_redundant",
)


def _optional_float(spec: Mapping[str, Any], key: str) -> float | None:
    value = spec.get(key)
    return None if value is None else float(value)


def node_classes_from(raw: Any) -> tuple[NodeClass, ...]:
    """node_classes: {name: {gpus, nvlinks_per_gpu, ib_ports, ib_rate_gbps, and the BMC
    figures inlet_max_celsius, max_power_watts, power_supplies,
    power_supplies_redundant}} (replaces all)."""
    if not isinstance(raw, dict):
        raise ValueError("node_classes: expected a mapping of class name to expectations")
    classes = []
    for name, spec in raw.items():
        where = f"node_classes.{key_text(name)}"
        if not isinstance(spec, dict):
            raise ValueError(f"{where}: expected a mapping")
        unknown = sorted(set(spec) - set(_NODE_CLASS_KEYS))
        if unknown:
            raise ValueError(f"{where}: unknown key(s): {', '.join(map(key_text, unknown))}")
        rate = _optional_float(spec, "ib_rate_gbps")
        node_class = NodeClass(
            name=str(name),
            gpus=int(spec.get("gpus", 0)),
            nvlinks_per_gpu=int(spec.get("nvlinks_per_gpu", 0)),
            ib_ports=int(spec.get("ib_ports", 0)),
            ib_rate_bytes_per_second=None if rate is None else gbps(rate),
            inlet_max_celsius=_optional_float(spec, "inlet_max_celsius"),
            max_power_watts=_optional_float(spec, "max_power_watts"),
            power_supplies=int(spec.get("power_supplies", 0)),
            power_supplies_redundant=int(spec.get("power_supplies_redundant", 0)),
        )
        if node_class.power_supplies_redundant >= max(node_class.power_supplies, 1):
            raise ValueError(
                f"{where}: power_supplies_redundant must be fewer than power_supplies, got "
                f"{node_class.power_supplies_redundant} of {node_class.power_supplies}"
            )
        classes.append(node_class)
    return tuple(classes)
