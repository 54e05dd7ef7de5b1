"""Fill a catalogue family from one sample object, the way its `Series` entries say.

The catalogue names attributes as text (`Field("info.name")`); this module resolves them
on the scope's sample object. Each family is compiled once into a reader (attrgetters for
its values and labels) that takes a whole run of objects, so a poll does no path parsing
and makes one call per family and run: turning ~2,300 samples of a DGX H100 into series
is a hot loop. A path that does not exist is a programming error and raises
AttributeError on every render of any hardware; tests/agent/test_catalogue.py also
resolves every path against the sample classes without rendering anything.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import attrgetter
from types import MappingProxyType

from nvwatch.agent.catalogue import Field, MetricSpec, Series
from nvwatch.agent.exposition.families import FamilySet

Objects = Sequence[tuple[tuple[str, ...], object]]  # (identity label values, object)
# adds the series of one family for a run of objects (one GPU's links, every HCA's ports):
# one call per family and run, not per sample, keeps the per-sample cost to the reading
Reader = Callable[[Objects, FamilySet], None]
# one Series entry of one object into (label values, value) columns
Fill = Callable[[object, tuple[str, ...], list[tuple[str, ...]], list[object]], None]
Getter = Callable[[object], object]
CompiledFamily = tuple[MetricSpec, Reader]


def getter(field: Field) -> Getter:
    """A function reading `field` from an object (attrgetter follows dotted paths); with a
    key, None when the mapping lacks the entry."""
    get: Getter = attrgetter(field.path)
    key = field.key
    if key is None:
        return get

    def entry(obj: object) -> object:
        value = get(obj)
        return value.get(key) if isinstance(value, Mapping) else None

    return entry


def label_text(value: object) -> str:
    """A label value: absent -> "", a tuple of GPU indices -> "0,1"."""
    if type(value) is str:
        return value
    if value is None:
        return ""
    if isinstance(value, tuple):
        return ",".join(str(v) for v in value)
    return str(value)


def compiled_families(specs: Iterable[MetricSpec]) -> tuple[CompiledFamily, ...]:
    """Each spec with its reader. Renderers compile their families once, at import, and
    keep the result as a module constant: no cache to look things up in per poll."""
    return tuple((spec, _reader(spec)) for spec in specs)


def emit_all(
    compiled: Iterable[CompiledFamily],
    objects: Sequence[tuple[Sequence[str], object]],
    out: FamilySet,
) -> None:
    """Catalogue order first, then object order: the family order a reader expects."""
    run = [(tuple(identity), obj) for identity, obj in objects]
    for spec, reader in compiled:
        reader(run, out)
        if spec.always_declared:
            out.declare(spec)


def _reader(spec: MetricSpec) -> Reader:
    if len(spec.series) == 1 and _is_plain(spec.series[0]):
        # the common case (one value per object, identity labels only), kept lean
        value = _value_getter(spec.series[0].value)

        def plain(objects: Objects, out: FamilySet) -> None:
            if len(objects) == 1:  # a GPU, the host: no lists to build
                ids, obj = objects[0]
                out.add_sample(spec, ids, value(obj))
            elif objects:
                out.add_series(spec, [i for i, _ in objects], [value(o) for _, o in objects])

        return plain
    fills = [_fill(series) for series in spec.series]

    def general(objects: Objects, out: FamilySet) -> None:
        keys: list[tuple[str, ...]] = []
        values: list[object] = []
        # object by object, each object's Series entries in catalogue order
        for ids, obj in objects:
            for fill in fills:
                fill(obj, ids, keys, values)
        out.add_series(spec, keys, values)

    return general


def _is_plain(series: Series) -> bool:
    return not (series.labels or series.each or series.present_if)


def _fill(series: Series) -> Fill:
    value = _value_getter(series.value)
    labels = _labels_getter(series.labels)
    present = getter(series.present_if) if series.present_if is not None else None
    if series.each:
        return _fill_each(value, labels, present, series.sort)

    def fill(
        obj: object, ids: tuple[str, ...], keys: list[tuple[str, ...]], values: list[object]
    ) -> None:
        if present is None or present(obj) is not None:
            keys.append(ids + labels(obj))
            values.append(value(obj))

    return fill


def _fill_each(
    value: Getter, labels: Callable[[object], tuple[str, ...]], present: Getter | None, sort: bool
) -> Fill:
    """One series per entry of the mapping `value` reads, its key the last label."""

    def fill(
        obj: object, ids: tuple[str, ...], keys: list[tuple[str, ...]], values: list[object]
    ) -> None:
        if present is not None and present(obj) is None:
            return
        key = ids + labels(obj)
        mapping = value(obj)
        # dict and mappingproxy first: isinstance(x, Mapping) is an ABC check
        if type(mapping) not in _MAPPINGS and not isinstance(mapping, Mapping):
            return
        entries = sorted(mapping.items()) if sort else mapping.items()  # type: ignore[attr-defined]
        for name, entry in entries:
            keys.append((*key, name if type(name) is str else str(name)))
            values.append(entry)

    return fill


_MAPPINGS = (dict, MappingProxyType)


def _value_getter(value: Field | float) -> Getter:
    if isinstance(value, Field):
        return getter(value)
    return lambda _obj: value


def _labels_getter(labels: tuple[str | Field, ...]) -> Callable[[object], tuple[str, ...]]:
    if all(isinstance(x, str) for x in labels):
        constant = tuple(str(x) for x in labels)
        return lambda _obj: constant
    getters = [getter(x) if isinstance(x, Field) else _constant(x) for x in labels]
    return lambda obj: tuple([label_text(get(obj)) for get in getters])


def _constant(value: str) -> Getter:
    return lambda _obj: value
