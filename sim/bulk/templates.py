"""Every series one node of a profile exports, rendered once by the agent's own code,
and made into node N's: its target labels added and the labels whose values are new on
every node (a GPU's uuid and serial, an HCA's node GUID) given node N's own values.

The series and their labels are therefore exactly what `nvwatch serve` of that profile
exports (the cardinality benchmark counts the same render); their first values too.
A node's BMC is rendered the same way, by the probe's own code (one probe of the
profile's simulated BMC, module `default`), and its series carry the `nvwatch-bmc`
job's target labels, the BMC's address included, as `nvwatch inventory` writes them.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from prometheus_client.parser import text_string_to_metric_families

from nvwatch.agent.exposition.bmc import probe_exposition
from nvwatch.agent.inventory_bmc import BMC_JOB
from nvwatch.agent.sources.bmc.reading import Target
from nvwatch.sim.bmc.reader import SIMULATED_MODULE, SimulatedBmcReader
from nvwatch.sim.clock import ManualClock
from nvwatch.sim.fleet.plan import NodeSpec, node_labels
from nvwatch.sim.node.node import SimulatedNode
from nvwatch.sim.series_budget import render_profile
from nvwatch.sim.tsdb.index import Labels

# label values new on every node (docs/scale.md's cardinality section measures which)
OWN_LABELS = ("uuid", "serial", "node_guid")
SCRAPE_JOB = "nvwatch"  # the `job` label deploy/'s scrape configuration gives the agents
_HEX = "0123456789abcdef"


@dataclass(frozen=True)
class Template:
    """One profile's series: name, own labels, type and first value of each."""

    profile: str
    names: tuple[str, ...]
    labels: tuple[Labels, ...]
    kinds: tuple[str, ...]  # the family's type: counter, gauge, info, ...
    first: npt.NDArray[np.float64]
    gpu: npt.NDArray[np.int64]  # the series' GPU index, -1 for the node's own
    gpus: int
    bmc: npt.NDArray[np.bool_]  # whether the series is its BMC's (the probe job's)

    def __len__(self) -> int:
        return len(self.names)

    def with_bmc(self, bmc: Template) -> Template:
        """This node's series and then its BMC's (`bmc`'s rows are all the BMC's)."""
        return Template(self.profile, self.names + bmc.names, self.labels + bmc.labels,
                        self.kinds + bmc.kinds, np.concatenate([self.first, bmc.first]),
                        np.concatenate([self.gpu, bmc.gpu]), self.gpus,
                        np.concatenate([self.bmc, np.ones(len(bmc), dtype=bool)]))  # fmt: skip


def render_template(
    profile: str, nvlink_detail: str = "link", ib_hw_counters: str = "default"
) -> Template:
    """`profile`'s exposition, as serve renders it at these settings, parsed."""
    with tempfile.TemporaryDirectory(prefix="nvwatch-bulk-") as root:
        text = render_profile(
            profile, Path(root), nvlink_detail=nvlink_detail, ib_hw_counters=ib_hw_counters
        )
    return parsed(profile, text)


def render_bmc_template(profile: str) -> Template:
    """One probe of `profile`'s simulated BMC, as the probe's body says it."""
    with tempfile.TemporaryDirectory(prefix="nvwatch-bulk-bmc-") as root:
        node = SimulatedNode(profile, seed=7, clock=ManualClock(0.0), sysfs_root=Path(root))
        try:
            reading = SimulatedBmcReader({"bmc": node}).read(Target("bmc"), SIMULATED_MODULE)
        finally:
            node.close()
    return parsed(profile, probe_exposition(reading, None, SIMULATED_MODULE).decode(), bmc=True)


def parsed(profile: str, text: str, bmc: bool = False) -> Template:
    """The series of the exposition `text`, in its order."""
    names, labels, kinds, first, gpu = [], [], [], [], []
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            names.append(sample.name)
            labels.append(tuple(sorted(sample.labels.items())))
            kinds.append(family.type)
            first.append(float(sample.value))
            gpu.append(int(sample.labels.get("gpu", "-1")))
    gpus = max(gpu) + 1
    return Template(profile, tuple(names), tuple(labels), tuple(kinds),
                    np.array(first), np.array(gpu), gpus,
                    np.full(len(names), bmc))  # fmt: skip


def node_series(template: Template, spec: NodeSpec) -> list[Labels]:
    """Node `spec`'s label sets, `__name__` and its target labels included: the agent's
    job's, or the BMC job's with the BMC's address (`spec.bmc`)."""
    node = tuple(node_labels(spec).items())
    agent = (("job", SCRAPE_JOB), *node)
    probe = (("job", BMC_JOB), *node, ("bmc", spec.bmc))
    out = []
    for name, pairs, bmc in zip(template.names, template.labels, template.bmc, strict=True):
        own = tuple(
            (key, own_value(value, spec.index)) if key in OWN_LABELS else (key, value)
            for key, value in pairs
        )
        out.append((("__name__", name), *(probe if bmc else agent), *own))
    return out


def own_value(value: str, node: int) -> str:
    """`value` made node `node`'s: its first characters after a `GPU-` or `0x` prefix
    replaced by the node's number, in the value's own alphabet (hex or decimal digits),
    so that it keeps its shape and the GPUs of one node stay apart."""
    prefix = next((p for p in ("GPU-", "0x") if value.startswith(p)), "")
    body = value[len(prefix) :]
    digits = body.isdigit()
    mark = f"{node:05d}" if digits else f"{node:05x}"
    if not digits and not all(c in _HEX for c in body[: len(mark)].lower()):
        return f"{value}-{node}"
    return prefix + mark + body[len(mark) :]
