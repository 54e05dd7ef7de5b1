"""The rest of NVML's device queries, so that every public pynvml `nvmlDevice*` query
reaches an answer: values where the simulated hardware has them, NotSupported where
the real driver would say so. One class composes the areas, each in its own
module; `SimulatedNvml` (library.py) puts it first among its bases, so that
`ProcessQueries`, which builds on `MemoryQueries`, comes before it in the MRO.
"""

from __future__ import annotations

from nvwatch.sim.nvml.board import BoardQueries
from nvwatch.sim.nvml.clock_settings import ClockSettingQueries
from nvwatch.sim.nvml.cooling import CoolingQueries
from nvwatch.sim.nvml.media import MediaQueries
from nvwatch.sim.nvml.nvlink_usage import NvLinkUsageQueries
from nvwatch.sim.nvml.processes import ProcessQueries
from nvwatch.sim.nvml.topology import TopologyQueries
from nvwatch.sim.nvml.unsupported import UnsupportedQueries


class CoverageQueries(
    TopologyQueries,
    ProcessQueries,
    BoardQueries,
    ClockSettingQueries,
    CoolingQueries,
    MediaQueries,
    NvLinkUsageQueries,
    UnsupportedQueries,
):
    """Device queries beyond what the agent itself reads."""
