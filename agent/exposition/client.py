"""prometheus_client's view of our families: the definition of correct output.

The agent renders its own bytes (agent/exposition/text.py), but what those bytes must be
is whatever prometheus_client would write for the same families. This module is the
bridge: family headers are prometheus_client's own output for the catalogue entry with no
samples (HELP escaping, counter naming and UNIT lines can then never drift from it), and
`nvwatch doctor`, `nvwatch dump --format json` and the tests read FamilySets as its Metric
objects. Nothing here runs per poll except on a family's first use.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from prometheus_client import CollectorRegistry
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics

from nvwatch.agent.catalogue import MetricSpec, MetricType

Family = GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily

_EOF = "# EOF\n"
# A histogram's series carry, after the family's labels, which sample each one is: its
# bucket's `le` text ("30.0", "+Inf"), or one of these two
HISTOGRAM_COUNT = "_count"
HISTOGRAM_SUM = "_sum"


def new_family(spec: MetricSpec) -> Family:
    unit = spec.unit
    labels = list(spec.labels)
    if spec.type is MetricType.COUNTER:
        return CounterMetricFamily(spec.name, spec.help, labels=labels, unit=unit)
    if spec.type is MetricType.HISTOGRAM:
        return HistogramMetricFamily(spec.name, spec.help, labels=labels, unit=unit)
    return GaugeMetricFamily(spec.name, spec.help, labels=labels, unit=unit)


def family_of(spec: MetricSpec, series: Iterable[tuple[Sequence[str], float]]) -> Family:
    """The prometheus_client family of `spec` with these (label values, value) series."""
    family = new_family(spec)
    if isinstance(family, HistogramMetricFamily):
        _add_histograms(family, series)
        return family
    for label_values, value in series:
        family.add_metric(label_values, value)
    return family


def _add_histograms(
    family: HistogramMetricFamily, series: Iterable[tuple[Sequence[str], float]]
) -> None:
    """Series of one histogram per label set, in the order buckets, _count, _sum (as the
    exposition writes them): each label set's buckets and sum, added once its sum comes."""
    buckets: list[tuple[str, float]] = []
    for label_values, value in series:
        *labels, part = label_values
        if part == HISTOGRAM_SUM:
            family.add_metric(labels, buckets, value)
            buckets = []
        elif part != HISTOGRAM_COUNT:  # the count is the +Inf bucket's, written again
            buckets.append((part, value))


def family_name(spec: MetricSpec) -> str:
    """The family's name as prometheus_client keeps it (a counter's without _total)."""
    return new_family(spec).name


def headers(spec: MetricSpec) -> tuple[str, str]:
    """(text 0.0.4, OpenMetrics) header lines of `spec`'s family, as prometheus_client
    writes them before the first sample."""
    registry = registry_of([new_family(spec)])
    text = generate_latest(registry).decode("utf-8")
    openmetrics = generate_openmetrics(registry).decode("utf-8")  # type: ignore[no-untyped-call]
    if not openmetrics.endswith(_EOF):
        raise ValueError(f"{spec.name}: OpenMetrics output does not end with # EOF")
    return text, openmetrics.removesuffix(_EOF)


class _Families:
    """A collector over already-built families, so generate_latest can render them."""

    def __init__(self, families: Iterable[Metric]) -> None:
        self._families = list(families)

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def registry_of(families: Iterable[Metric]) -> CollectorRegistry:
    """A private registry over already-built families, for prometheus_client's renderers."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(families))
    return registry
