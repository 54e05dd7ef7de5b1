"""Fill a catalogue family from one sample object, the way its `Series` entries say.

The catalogue names attributes as text (`Field("info.name")`); this module resolves them
on the scope's sample object. A path that does not exist is a programming error and
raises AttributeError on every render of any hardware; tests/agent/test_catalogue.py also
resolves every path against the sample classes without rendering anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from agent.catalogue import Field, MetricSpec, Series
from agent.exposition.families import FamilySet


def read(obj: object, field: Field) -> object:
    """The value `field` names on `obj`; None when a keyed mapping lacks the entry."""
    value = obj
    for part in field.path.split("."):
        value = getattr(value, part)
    if field.key is None:
        return value
    return value.get(field.key) if isinstance(value, Mapping) else None


def label_text(value: object) -> str:
    """A label value: absent -> "", a tuple of GPU indices -> "0,1"."""
    if value is None:
        return ""
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def emit(spec: MetricSpec, obj: object, identity: Sequence[str], out: FamilySet) -> None:
    """Every series of `spec` for one object whose identity label values are `identity`."""
    for series in spec.series:
        for label_values, value in _samples(series, obj):
            out.add_sample(spec, [*identity, *label_values], value)


def emit_all(
    specs: Iterable[MetricSpec], objects: Sequence[tuple[Sequence[str], object]], out: FamilySet
) -> None:
    """Catalogue order first, then object order: the family order a reader expects."""
    for spec in specs:
        for identity, obj in objects:
            emit(spec, obj, identity, out)
        if spec.always_declared:
            out.declare(spec)


def _samples(series: Series, obj: object) -> Iterable[tuple[list[str], object]]:
    if series.present_if is not None and read(obj, series.present_if) is None:
        return ()
    labels = [label_text(read(obj, x)) if isinstance(x, Field) else x for x in series.labels]
    value = read(obj, series.value) if isinstance(series.value, Field) else series.value
    if not series.each:
        return ((labels, value),)
    entries = list(value.items()) if isinstance(value, Mapping) else []
    if series.sort:
        entries.sort()
    return (([*labels, str(key)], entry) for key, entry in entries)
