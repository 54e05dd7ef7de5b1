"""A rank's GPU copy held at the load its job gives it, and the speeds read off it.

A rank's shadow (shadow.py) runs no workload on its GPU copy: it holds the copy at the
job's mean load between the instants the job asks the rank's speeds, so the copy heats
and cools, and its faults come and go, as the rank's own GPU does. `HeldGpu` adds that
to the simulated board (nvwatch.sim.gpu.model), with what the job reads off it: the
share of its clocks left while computing and the share of its NVLink bandwidth.
"""

from __future__ import annotations

from nvwatch.sim.gpu.model import SimulatedGpu
from nvwatch.sim.gpu.thermal import power_at


class HeldGpu(SimulatedGpu):
    """A SimulatedGpu a rank's shadow holds at its job's load instead of stepping it."""

    def hold(self, until: float, intensity: float, util: float) -> None:
        """Integrate power and temperature up to `until` under one constant load, scenario
        hooks running as in step(): a rank's shadow holds the load its job gives it, with
        no workload or traffic to integrate."""
        n, dt = self._substeps(until)
        for _ in range(n):
            for hook in self.scenario_hooks:
                hook(self, self.time + dt - self.start_time)
            self._breathe(self.time + dt)
            self._integrate_power(dt, intensity, util)
            self.time += dt

    def compute_speed(self, intensity: float) -> float:
        """Share of its full clocks the GPU runs at while computing at `intensity` now:
        the power limit, the thermal controller and a gpu-slow slowdown together."""
        model = self.model
        demand = intensity * (model.tdp_watts - model.idle_watts) * self.speed_factor
        factor = power_at(model, self.power_limit_w, self.temperature_c, demand)[1]
        return factor * self.speed_factor

    def nvlink_share(self) -> float:
        """Share of its NVLink bandwidth the GPU has now (1.0 without NVLink): its live
        links, each at nvlink_speed."""
        if not self.links:
            return 1.0
        return self.nvlink_speed * sum(link.up for link in self.links) / len(self.links)
