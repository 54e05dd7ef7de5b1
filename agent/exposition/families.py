"""Build Prometheus metric families from samples, checked against the catalogue.

Renderers call `FamilySet.add(name, labels, value)`; this module is the one place that
turns catalogue entries into prometheus_client families, so HELP, type, unit and label
names can never drift from the contract. A `None` value is skipped: a value the hardware
does not support is absent, never 0.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agent.catalogue import MetricSpec, MetricType, spec


class FamilySet:
    """An ordered set of families under construction for one render."""

    def __init__(self) -> None:
        self._families: dict[str, tuple[MetricSpec, GaugeMetricFamily | CounterMetricFamily]] = {}

    def add(self, name: str, labels: Mapping[str, str], value: float | int | bool | None) -> None:
        if value is None:
            return
        entry = self._families.get(name)
        if entry is None:
            metric_spec = spec(name)
            entry = (metric_spec, _new_family(metric_spec))
            self._families[name] = entry
        metric_spec, family = entry
        if tuple(labels) != metric_spec.labels:
            raise ValueError(
                f"{name}: labels {tuple(labels)} do not match catalogue {metric_spec.labels}"
            )
        # float() here turns a wrong type from a source into an error during render, where
        # the poller can blame that one source, instead of while serialising the scrape.
        family.add_metric([str(v) for v in labels.values()], float(value))

    def declare(self, name: str) -> None:
        """Emit HELP/TYPE for a family even when it has no samples this poll."""
        if name not in self._families:
            metric_spec = spec(name)
            self._families[name] = (metric_spec, _new_family(metric_spec))

    def __iter__(self) -> Iterator[Metric]:
        return (family for _, family in self._families.values())

    def names(self) -> list[str]:
        return list(self._families)


def _new_family(metric_spec: MetricSpec) -> GaugeMetricFamily | CounterMetricFamily:
    unit = metric_spec.unit
    labels = list(metric_spec.labels)
    if metric_spec.type is MetricType.COUNTER:
        return CounterMetricFamily(metric_spec.name, metric_spec.help, labels=labels, unit=unit)
    return GaugeMetricFamily(metric_spec.name, metric_spec.help, labels=labels, unit=unit)
