"""The power and thermal law of one GPU: what it draws at a temperature for a demand, the
temperature it settles at, and the throttle reasons that follow.

Pure functions of the board (`GpuModel`), its power limit and its thermal resistance, so
`nvwatch.sim.gpu.model.SimulatedGpu` (which integrates them over time) and tests
can ask them anything:
- the power limit caps the dynamic power (SW power cap reason);
- above the slowdown temperature a proportional controller pulls the clocks, and with
  them the dynamic power, down (thermal reasons);
- temperature relaxes towards ambient + R x power. The controller makes power depend on
  temperature, so `steady_temperature` solves for the closed-loop steady state. Ambient
  is the air the board breathes: the node's inlet (sim/bmc/model.py) where the node has a
  BMC model, AMBIENT_C otherwise.
"""

from __future__ import annotations

from nvwatch.sim.gpu.state import (
    REASON_GPU_IDLE,
    REASON_HW_THERMAL,
    REASON_SW_POWER_CAP,
    REASON_SW_THERMAL,
)
from nvwatch.sim.profiles import GpuModel

AMBIENT_C = 25.0  # DGX inlet air; the DGX-1 white paper allows 5-35 C
# Proportional thermal controller: each degree above slowdown takes 10% off the dynamic
# power (~ what nvidia-smi shows on an overheating board: clocks fall until the
# temperature holds a few degrees above the slowdown threshold).
THERMAL_GAIN_PER_C = 0.10
MIN_CLOCK_FACTOR = 0.25  # the driver does not go below ~ a quarter of the boost clock


def power_at(
    model: GpuModel, power_limit_w: float, temperature: float, dynamic_demand_w: float
) -> tuple[float, float, bool]:
    """(power W, clock factor, capped) at this temperature for this demand."""
    over = temperature - model.temp_slowdown_c
    thermal = 1.0 if over <= 0 else max(MIN_CLOCK_FACTOR, 1.0 - THERMAL_GAIN_PER_C * over)
    dynamic = dynamic_demand_w * thermal
    headroom = max(0.0, power_limit_w - model.idle_watts)
    capped = dynamic > headroom
    if capped:
        dynamic = headroom
    factor = 1.0 if dynamic_demand_w <= 0 else dynamic / dynamic_demand_w
    return model.idle_watts + dynamic, factor, capped


def steady_temperature(
    model: GpuModel,
    power_limit_w: float,
    resistance_c_per_w: float,
    dynamic_demand_w: float,
    ambient_c: float = AMBIENT_C,
) -> float:
    """Closed-loop steady state: T = ambient + R x power(T), power falling with T."""
    r = resistance_c_per_w

    def excess(t: float) -> float:
        return ambient_c + r * power_at(model, power_limit_w, t, dynamic_demand_w)[0] - t

    if excess(model.temp_slowdown_c) <= 0:
        # below slowdown power does not depend on temperature: open loop is exact
        return ambient_c + r * power_at(model, power_limit_w, ambient_c, dynamic_demand_w)[0]
    hi = ambient_c + r * (model.idle_watts + dynamic_demand_w) + 1.0
    lo = float(model.temp_slowdown_c)
    for _ in range(20):  # excess() is decreasing in t: bisection to ~1e-4 C
        mid = (lo + hi) / 2
        if excess(mid) > 0:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def throttle_reasons(model: GpuModel, temperature: float, util: float, *, capped: bool) -> int:
    """The clock event reasons (nvmlClocksEventReasons) of this state."""
    reasons = 0
    if util < 0.01:
        reasons |= REASON_GPU_IDLE
    if capped:
        reasons |= REASON_SW_POWER_CAP
    if temperature > model.temp_slowdown_c:
        reasons |= REASON_SW_THERMAL | REASON_HW_THERMAL
    return reasons
