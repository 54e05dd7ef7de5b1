"""Every series one node of a profile exports, rendered once by the agent's own code,
and made into node N's: its target labels added and the labels whose values are new on
every node (a GPU's uuid and serial, an HCA's node GUID) given node N's own values.

The series and their labels are therefore exactly what `nvwatch serve` of that profile
exports (the cardinality benchmark counts the same render); their first values too.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from prometheus_client.parser import text_string_to_metric_families

from nvwatch.sim.fleet.plan import NodeSpec, node_labels
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

    def __len__(self) -> int:
        return len(self.names)


def render_template(
    profile: str, nvlink_detail: str = "link", ib_hw_counters: str = "default"
) -> Template:
    """`profile`'s exposition, as serve renders it at these settings, parsed."""
    with tempfile.TemporaryDirectory(prefix="nvwatch-bulk-") as root:
        text = render_profile(
            profile, Path(root), nvlink_detail=nvlink_detail, ib_hw_counters=ib_hw_counters
        )
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
                    np.array(first), np.array(gpu), gpus)  # fmt: skip


def node_series(template: Template, spec: NodeSpec) -> list[Labels]:
    """Node `spec`'s label sets, `__name__` and its target labels included."""
    target = (("job", SCRAPE_JOB), *node_labels(spec).items())
    out = []
    for name, pairs in zip(template.names, template.labels, strict=True):
        own = tuple(
            (key, own_value(value, spec.index)) if key in OWN_LABELS else (key, value)
            for key, value in pairs
        )
        out.append((("__name__", name), *target, *own))
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
