"""What a history writes for one node's BMC at one instant: the `nvwatch-bmc` job's scrape.

A management host probes every BMC (`/probe?target=<bmc>&module=default`), so the series
carry that job's labels: the node's `cluster`, `rack`, `node_class` and `instance` (the
join with its GPU series) and `bmc`, its address. The BMC answers whether or not the
node's agent does, so an agent-down episode leaves these series whole.

The values are the probe's: the node's SDR readings (sim/bmc/sdr.py) go through the
`bmc` source's own interpreter and the exposition's readers of the catalogue's BMC
families, as /probe fills them, into plain rows instead of the exposition's slots (no
text rendered and parsed for every step of a month). The read's duration is left out: no
read happened, and a history must be the same for the same seed.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import cast

from nvwatch.agent.catalogue import MetricSpec, Scope, of_scope
from nvwatch.agent.exposition.families import FamilySet
from nvwatch.agent.exposition.series import compiled_families, emit_all
from nvwatch.agent.inventory_bmc import BMC_JOB
from nvwatch.agent.sources.bmc.interpret import failed, interpret
from nvwatch.agent.sources.bmc.reading import BmcReading, Module
from nvwatch.sim.fleet.plan import NodeSpec, node_labels

UP = "up"
DURATION = "nvwatch_bmc_read_duration_seconds"
_PROBE_PLANS = compiled_families(s for s in of_scope(Scope.BMC) if s.name != DURATION)
_SENSOR_PLANS = compiled_families(of_scope(Scope.BMC_SENSOR))
BMC_FAMILIES: tuple[str, ...] = tuple(spec.name for spec, _ in (*_PROBE_PLANS, *_SENSOR_PLANS))

Row = tuple[str, str, float]


Sample = tuple[str, tuple[tuple[str, str], ...], float]  # family, own labels, value


class _Samples:
    """What the exposition's readers write into a FamilySet, kept as plain samples."""

    def __init__(self) -> None:
        self.samples: list[Sample] = []

    def add_sample(self, spec: MetricSpec, label_values: Sequence[str], value: object) -> None:
        if value is not None:
            labels = tuple(zip(spec.labels, label_values, strict=True))
            self.samples.append((spec.name, labels, float(value)))  # type: ignore[arg-type]

    def add_series(
        self, spec: MetricSpec, label_values: Sequence[tuple[str, ...]], values: Sequence[object]
    ) -> None:
        for labels, value in zip(label_values, values, strict=True):
            self.add_sample(spec, labels, value)

    def declare(self, spec: MetricSpec) -> None:
        pass  # no HELP without samples here: the history declares every family itself


def probe_samples(reading: BmcReading | None, module: Module) -> list[Sample]:
    """The series /probe exports for `reading` (None: a BMC that did not answer), read by
    `module`'s rules, in the probe's order; the read's duration left out."""
    probe = failed(None) if reading is None else interpret(reading, module)
    out = _Samples()
    sink = cast(FamilySet, out)  # the readers call add_sample, add_series and declare
    emit_all(_PROBE_PLANS, [((), probe)], sink)
    emit_all(_SENSOR_PLANS, [((sensor.name,), sensor) for sensor in probe.sensors], sink)
    return out.samples


class BmcSeries:
    """One node's BMC as the `nvwatch-bmc` job records it; rendered label sets cached."""

    def __init__(self, spec: NodeSpec, module: Module) -> None:
        self.spec = spec
        self.module = module
        self.target = {"job": BMC_JOB, **node_labels(spec), "bmc": spec.bmc}
        self._cache: dict[tuple[tuple[str, str], ...], str] = {}

    def labels(self, own: tuple[tuple[str, str], ...] = ()) -> str:
        """The rendered label set: the job's labels, then the series' own."""
        labels = self._cache.get(own)
        if labels is None:
            pairs = {**self.target, **dict(own)}
            labels = "{" + ",".join(f'{k}="{_escaped(v)}"' for k, v in pairs.items()) + "}"
            self._cache[own] = labels
        return labels

    def rows(self, reading: BmcReading | None) -> Iterator[Row]:
        """The scrape of the probe: `up` 1 (the management host answers), and the BMC's
        series (`nvwatch_bmc_up` 0 alone for a BMC that did not answer)."""
        yield UP, self.labels(), 1.0
        for family, own, value in probe_samples(reading, self.module):
            yield family, self.labels(own), value


def _escaped(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
