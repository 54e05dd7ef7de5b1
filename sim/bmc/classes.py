"""The node around the GPUs, per hardware profile: what its BMC measures, and the figures.

Data only; sim/bmc/model.py runs the physics on it. Figures marked ~ are estimates (as
in the profiles): check them against the user guide of the exact model. Sources:
- system maximum: the profile's `system_power_watts`, NVIDIA's published system power
  (DGX-1 3.2 kW with P100 and 3.5 kW with V100, the DGX-1 white paper's 3.2 kW TDP; DGX-2
  10 kW; DGX A100 6.5 kW; DGX H100 10.2 kW: the DGX datasheets);
- operating inlet air: the DGX user guides (DGX-1: 5-35 °C, the DGX-1 white paper);
- power supplies (count x rating, how many carry the maximum): the DGX user guides;
- processors and their TDP: the DGX datasheets' CPUs, at the vendor's TDP;
- fans: ~ estimates throughout (the GPU tray's fan modules, their top speed and draw).

What the node draws besides its GPUs, CPUs and fans (memory, NICs, NVSwitches, drives,
board losses) is not published; sim/bmc/model.py takes it as what the system maximum
leaves once GPUs, CPUs and fans are at theirs (`rest_max_watts`), so a node at every
limit draws exactly the published figure.
"""

from __future__ import annotations

from dataclasses import dataclass

from nvwatch.sim.profiles import Profile

# IPMI 2.0 table 43-13 entity ids the simulated SDRs use
ENTITY_PROCESSOR = 0x03
ENTITY_POWER_SUPPLY = 0x0A
ENTITY_SYSTEM_BOARD = 0x07
ENTITY_POWER_UNIT = 0x13
ENTITY_FAN = 0x1D
ENTITY_AIR_INLET = 0x37

# ~ 80 PLUS Platinum at mid load (DGX supplies are Platinum or Titanium): the BMC reads
# the supplies' input, so their loss is part of what it reports
PSU_EFFICIENCY = 0.94


@dataclass(frozen=True)
class PowerSupplies:
    count: int
    watts_each: float
    carry_max: int  # supplies that carry the system maximum alone; the others are spares

    @property
    def spares(self) -> int:
        return self.count - self.carry_max


@dataclass(frozen=True)
class BmcClass:
    """One node class's chassis, as its BMC describes it."""

    inlet_min_c: float  # the operating envelope of the inlet air
    inlet_max_c: float
    supplies: PowerSupplies
    cpus: int
    cpu_tdp_watts: float
    fans: int  # chassis fans in front of the GPUs, FAN1..FANn in the SDR
    fan_max_rpm: float  # ~
    fan_max_watts: float  # ~ each, at full speed
    # the inlet sensor's entity: 0x37 (air inlet) on DGX BMCs; a vendor that sets none
    # reports it on the system board (0x07), and only its name says "inlet"
    inlet_entity: int = ENTITY_AIR_INLET
    # fan headers in the SDR with nothing plugged in: their reading is "unavailable"
    empty_fan_headers: int = 0
    # DCMI Get Power Reading: DGX BMCs answer it; a workstation board's BMC does not
    dcmi: bool = True


_DGX1 = BmcClass(
    inlet_min_c=5,  # DGX-1 white paper: 5-35 °C
    inlet_max_c=35,
    supplies=PowerSupplies(4, 1600, 3),  # ~ DGX-1 user guide: 4 x 1,600 W, 3+1
    cpus=2,  # DGX-1 datasheet: 2x Intel Xeon E5-2698 v4
    cpu_tdp_watts=135,  # Intel: E5-2698 v4 TDP
    fans=4,  # ~ one fan module per GPU pair
    fan_max_rpm=11_000,  # ~
    fan_max_watts=30,  # ~
)

BMC_CLASSES: dict[str, BmcClass] = {
    "dgx1-p100": _DGX1,
    "dgx1-v100": _DGX1,
    "dgx-station": BmcClass(
        inlet_min_c=10,  # ~ DGX Station user guide: 10-30 °C
        inlet_max_c=30,
        supplies=PowerSupplies(1, 1500, 1),  # ~ one supply
        cpus=1,  # DGX Station datasheet: 1x Intel Xeon E5-2698 v4
        cpu_tdp_watts=135,
        fans=2,  # ~ the water loop's radiator fans
        fan_max_rpm=3_000,  # ~ quiet 120 mm fans: a desk-side machine
        fan_max_watts=5,  # ~
    ),
    "dgx2": BmcClass(
        inlet_min_c=5,  # ~ DGX-2 user guide: 5-35 °C
        inlet_max_c=35,
        # ~ 6 x 3,000 W; the redundancy is not in the table: four carry 10 kW, two spare
        supplies=PowerSupplies(6, 3000, 4),
        cpus=2,  # DGX-2 datasheet: 2x Intel Xeon Platinum 8168
        cpu_tdp_watts=205,  # Intel: Platinum 8168 TDP
        fans=8,  # ~ one per GPU pair, both baseboards
        fan_max_rpm=12_000,  # ~
        fan_max_watts=60,  # ~
    ),
    "dgx-a100": BmcClass(
        inlet_min_c=5,  # ~ DGX A100 user guide: 5-30 °C
        inlet_max_c=30,
        supplies=PowerSupplies(6, 3000, 3),  # ~ DGX A100 user guide: 6 x 3,000 W, 3+3
        cpus=2,  # DGX A100 datasheet: 2x AMD EPYC 7742
        cpu_tdp_watts=225,  # AMD: EPYC 7742 TDP
        fans=4,  # ~ one fan module per GPU pair
        fan_max_rpm=14_000,  # ~
        fan_max_watts=80,  # ~
    ),
    "dgx-h100": BmcClass(
        inlet_min_c=5,  # ~ DGX H100 user guide: 5-30 °C
        inlet_max_c=30,
        supplies=PowerSupplies(6, 3300, 4),  # ~ DGX H100 user guide: 6 x 3,300 W, 4+2
        cpus=2,  # DGX H100 datasheet: 2x Intel Xeon Platinum 8480C
        cpu_tdp_watts=350,  # Intel: Platinum 8480+ TDP (the C part is NVIDIA's bin)
        fans=4,  # ~ one fan module per GPU pair
        fan_max_rpm=16_000,  # ~
        fan_max_watts=120,  # ~
    ),
    "geforce-workstation": BmcClass(
        inlet_min_c=10,  # ~ an office machine: 10-35 °C (ASHRAE class A2)
        inlet_max_c=35,
        supplies=PowerSupplies(1, 1600, 1),  # ~ one 1,600 W supply
        cpus=1,  # ~ a 65 W desktop processor
        cpu_tdp_watts=65,
        fans=3,  # ~ case fans; the GeForce boards have their own
        fan_max_rpm=2_000,  # ~
        fan_max_watts=3,  # ~
        inlet_entity=ENTITY_SYSTEM_BOARD,  # ~ a workstation board's BMC names it only
        empty_fan_headers=1,  # ~ FAN4 on the board, nothing plugged in
        dcmi=False,  # ~ no DCMI power: the power sensor alone
    ),
    "inference-t4": BmcClass(
        inlet_min_c=10,  # ~ a 2U server: 10-35 °C (ASHRAE class A2)
        inlet_max_c=35,
        supplies=PowerSupplies(2, 800, 1),  # ~ 2 x 800 W, 1+1
        cpus=2,  # ~ 2x Xeon Silver 4210
        cpu_tdp_watts=85,  # Intel: Silver 4210 TDP
        fans=4,  # ~ one per T4
        fan_max_rpm=12_000,  # ~
        fan_max_watts=12,  # ~
        inlet_entity=ENTITY_SYSTEM_BOARD,  # ~ as many server BMCs report "Inlet Temp"
    ),
}
BMC_CLASSES["hgx-h200"] = BMC_CLASSES["dgx-h100"]  # ~ the DGX H200 is the H100's chassis


def bmc_class(profile: Profile) -> BmcClass:
    return BMC_CLASSES[profile.name]


def rest_max_watts(profile: Profile, chassis: BmcClass) -> float:
    """What the node draws besides GPUs, CPUs and fans when everything is at its maximum:
    the system maximum (at the supplies' input) less those, after the supplies' loss."""
    gpus = sum(model.tdp_watts for model in profile.gpus)
    cpus = chassis.cpus * chassis.cpu_tdp_watts
    fans = chassis.fans * chassis.fan_max_watts
    return profile.system_power_watts * PSU_EFFICIENCY - gpus - cpus - fans
