"""Build Prometheus metric families from samples, checked against the catalogue.

This module is the one place that turns catalogue entries into prometheus_client
families, so HELP, type, unit and label names can never drift from the contract. A
`None` value is skipped (a value the hardware does not support is absent, never 0), but
only after the name was looked up: a name outside the catalogue fails the same way
whether or not this hardware has the value.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from agent.catalogue import MetricSpec, MetricType, spec

Family = GaugeMetricFamily | CounterMetricFamily


class FamilySet:
    """An ordered set of families under construction for one render."""

    def __init__(self) -> None:
        self._families: dict[str, Family] = {}

    def add(self, name: str, labels: Mapping[str, str], value: float | int | bool | None) -> None:
        """One sample of family `name`; the label names must be the catalogue's, in order."""
        metric_spec = spec(name)
        if tuple(labels) != metric_spec.labels:
            raise ValueError(
                f"{name}: labels {tuple(labels)} do not match catalogue {metric_spec.labels}"
            )
        self.add_sample(metric_spec, [str(v) for v in labels.values()], value)

    def add_sample(
        self, metric_spec: MetricSpec, label_values: Sequence[str], value: object
    ) -> None:
        """One sample, label values in the order of `metric_spec.labels`."""
        if value is None:
            return
        family = self._families.get(metric_spec.name)
        if family is None:
            family = self._families[metric_spec.name] = _new_family(metric_spec)
        # float() here turns a wrong type from a source into an error during render, where
        # the poller can blame that one source, instead of while serialising the scrape.
        family.add_metric(label_values, float(value))  # type: ignore[arg-type]

    def declare(self, metric_spec: MetricSpec) -> None:
        """Emit HELP/TYPE for a family even when it has no samples this poll."""
        if metric_spec.name not in self._families:
            self._families[metric_spec.name] = _new_family(metric_spec)

    def __iter__(self) -> Iterator[Metric]:
        return iter(self._families.values())

    def names(self) -> list[str]:
        return list(self._families)


def _new_family(metric_spec: MetricSpec) -> Family:
    unit = metric_spec.unit
    labels = list(metric_spec.labels)
    if metric_spec.type is MetricType.COUNTER:
        return CounterMetricFamily(metric_spec.name, metric_spec.help, labels=labels, unit=unit)
    return GaugeMetricFamily(metric_spec.name, metric_spec.help, labels=labels, unit=unit)
