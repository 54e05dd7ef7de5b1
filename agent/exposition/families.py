"""One source's series for one poll, checked against the catalogue, each on its slot.

This module is the one place samples become series, so HELP, type, unit and label names
can never drift from the contract. A `None` value is skipped (a value the hardware does
not support is absent, never 0), but only after the name was looked up: a name outside
the catalogue fails the same way whether or not this hardware has the value.

A FamilySet keeps, per family in order of first appearance, the series' slots (their
cached `name{labels} ` prefixes, agent/exposition/slots.py) and float values; the renderer
reads them directly. Iterating one yields prometheus_client Metric objects, built on
demand for `nvwatch doctor`, `nvwatch dump` and tests, never on the poll path.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from prometheus_client.core import Metric

from nvwatch.agent.catalogue import MetricSpec, spec
from nvwatch.agent.exposition import client
from nvwatch.agent.exposition.slots import FamilyTable, Slot, table_of


class Family:
    """One family's series in one FamilySet, in the order they were added."""

    __slots__ = ("_add_slot", "_add_value", "_new_slot", "_refs", "slots", "table", "values")

    def __init__(self, table: FamilyTable) -> None:
        self.table = table
        self.slots: list[Slot] = []
        self.values: list[float] = []
        # bound once per family and poll, not once per run of objects
        self._refs, self._new_slot = table.refs, table.new_slot
        self._add_slot, self._add_value = self.slots.append, self.values.append

    def extend(self, label_values: Sequence[tuple[str, ...]], values: Sequence[object]) -> None:
        """Each series on its slot; this loop runs once per series per poll."""
        refs, add_slot, add_value = self._refs, self._add_slot, self._add_value
        for key, value in zip(label_values, values, strict=True):
            if value is None:
                continue
            # float() here turns a wrong type from a source into an error during prepare,
            # where the poller can blame that one source, not while rendering the poll
            number = float(value)  # type: ignore[arg-type]
            ref = refs.get(key)
            slot = ref() if ref is not None else None
            add_slot(slot if slot is not None else self._new_slot(key))
            add_value(number)


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
        self.add_sample(metric_spec, tuple(str(v) for v in labels.values()), value)

    def add_sample(
        self, metric_spec: MetricSpec, label_values: Sequence[str], value: object
    ) -> None:
        """One sample, label values in the order of `metric_spec.labels`."""
        if value is None:
            return
        family = self._families.get(metric_spec.name)
        if family is None:
            family = self._families[metric_spec.name] = Family(table_of(metric_spec))
        # one series (a GPU's, the host's): Family.extend without its lists and loop
        key = label_values if type(label_values) is tuple else tuple(label_values)
        number = float(value)  # type: ignore[arg-type]
        ref = family._refs.get(key)
        slot = ref() if ref is not None else None
        family._add_slot(slot if slot is not None else family._new_slot(key))
        family._add_value(number)

    def add_series(
        self,
        metric_spec: MetricSpec,
        label_values: Sequence[tuple[str, ...]],
        values: Sequence[object],
    ) -> None:
        """Series of one family: label values and value pairs, in order; None is absent."""
        family = self._families.get(metric_spec.name)
        if family is None:
            if values.count(None) == len(values):
                return  # a family appears with its first value, not before
            family = self._families[metric_spec.name] = Family(table_of(metric_spec))
        family.extend(label_values, values)

    def declare(self, metric_spec: MetricSpec) -> None:
        """Emit HELP/TYPE for a family even when it has no samples this poll."""
        if metric_spec.name not in self._families:
            self._families[metric_spec.name] = Family(table_of(metric_spec))

    def families(self) -> Iterator[Family]:
        """The families in exposition order, for the renderer."""
        return iter(self._families.values())

    def series(self) -> int:
        return sum(len(family.slots) for family in self._families.values())

    def __iter__(self) -> Iterator[Metric]:
        """prometheus_client's Metric of each family (built now, for readers off the poll
        path: doctor, dump, tests)."""
        for family in self._families.values():
            pairs = zip((s.label_values for s in family.slots), family.values, strict=True)
            yield client.family_of(family.table.spec, pairs)

    def names(self) -> list[str]:
        return list(self._families)
