"""The slot table: per catalogue family, its header lines and one slot per live series.

A slot is one series' `name{labels} ` prefix, escaped and label-sorted once, plus the
line it rendered last. Label sets are stable from poll to poll (the same GPUs, links and
ports), so the exposition formats only values; escaping and sorting labels on every poll
was most of what prometheus_client's `generate_latest` cost us.

Bounded by construction: a FamilySet holds its slots, the table only weak references, so
a series is in the table while an exposition that shows it is alive. A process that exits,
a port that flaps away or a GPU that falls off the bus leaves the table when the last
exposition with it is dropped (the agent keeps one), whatever the churn. One table serves
every agent of the process (a simulated fleet runs many): the same family and label values
give the same text, so sharing a slot between agents is harmless.
"""

from __future__ import annotations

import math
import re
import threading
import weakref
from collections.abc import Callable, Sequence

from nvwatch.agent.catalogue import MetricSpec, MetricType
from nvwatch.agent.exposition import client

# Names prometheus_client writes verbatim in every release we allow and in both formats;
# anything else (a colon, UTF-8) is quoted or escaped differently by version and format.
_PLAIN_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def escape_label_value(value: str) -> str:
    """Backslash, newline and double quote escaped, as prometheus_client does.

    Not its own function: that is private and has had three signatures among the
    releases pyproject allows (inline in 0.20-0.21); the rule itself never changed, and
    tests/agent/test_render_values.py compares the two.
    """
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class Slot:
    """One series: its prefix, its label values and the last line it rendered."""

    __slots__ = ("__weakref__", "label_values", "memo", "prefix")

    def __init__(self, label_values: tuple[str, ...], prefix: str) -> None:
        self.label_values = label_values
        self.prefix = prefix
        # (value, its whole line); one tuple so a reader on another thread never pairs
        # one poll's value with another's line. NaN equals nothing: the first poll formats.
        self.memo: tuple[float, str] = (math.nan, "")


class FamilyTable:
    """One catalogue family: headers computed once, slots keyed by label values."""

    def __init__(self, spec: MetricSpec) -> None:
        for name in (spec.name, *spec.labels):
            if not _PLAIN_NAME.fullmatch(name):
                raise ValueError(f"{spec.name}: {name!r} is not a plain Prometheus name")
        self.spec = spec
        self.header_text, self.header_openmetrics = client.headers(spec)
        # what CounterMetricFamily.add_metric names the samples: the family name without
        # _total (its own munging), plus _total
        base = client.family_name(spec)
        self.sample_name = base + "_total" if spec.type is MetricType.COUNTER else base
        self.histogram = spec.type is MetricType.HISTOGRAM
        # a histogram's series end with their sample: a bucket's `le`, _count or _sum
        self.label_names = (*spec.labels, "le") if self.histogram else spec.labels
        # prometheus_client writes labels sorted by name
        self._order = sorted(range(len(spec.labels)), key=spec.labels.__getitem__)
        # label values -> the live slot; looked up by Family.extend (families.py)
        self.refs: dict[tuple[str, ...], weakref.ref[Slot]] = {}

    def new_slot(self, label_values: tuple[str, ...]) -> Slot:
        """A slot for a series the table does not hold (first poll, a new process)."""
        if len(label_values) != len(self.label_names):
            raise ValueError(
                f"{self.spec.name}: {len(label_values)} label values for {self.label_names}"
            )
        slot = Slot(label_values, self._prefix(label_values))
        self.refs[label_values] = weakref.ref(slot, _forget(self.refs, label_values))
        return slot

    def _prefix(self, values: Sequence[str]) -> str:
        if self.histogram:
            return self._histogram_prefix(values)
        return self._labelled(
            self.sample_name, [(self.label_names[i], values[i]) for i in self._order]
        )

    def _histogram_prefix(self, values: Sequence[str]) -> str:
        """`name_bucket{le=...}`, `name_count` or `name_sum`, with the family's labels."""
        *labels, part = values
        pairs = [(self.label_names[i], labels[i]) for i in self._order]
        if part in (client.HISTOGRAM_COUNT, client.HISTOGRAM_SUM):
            return self._labelled(self.sample_name + part, pairs)
        return self._labelled(self.sample_name + "_bucket", sorted([*pairs, ("le", part)]))

    @staticmethod
    def _labelled(name: str, pairs: Sequence[tuple[str, str]]) -> str:
        if not pairs:
            return name + " "
        text = ",".join(f'{label}="{escape_label_value(value)}"' for label, value in pairs)
        return f"{name}{{{text}}} "

    def __len__(self) -> int:
        return len(self.refs)


def _forget(
    refs: dict[tuple[str, ...], weakref.ref[Slot]], key: tuple[str, ...]
) -> Callable[[weakref.ref[Slot]], None]:
    def forget(ref: weakref.ref[Slot]) -> None:
        # only our own entry: another agent's thread may already hold a newer slot here
        if refs.get(key) is ref:
            refs.pop(key, None)

    return forget


_TABLES: dict[str, FamilyTable] = {}
_TABLES_LOCK = threading.Lock()


def table_of(spec: MetricSpec) -> FamilyTable:
    """The table of `spec`'s family, made on first use (its headers cost a render)."""
    table = _TABLES.get(spec.name)
    if table is not None and (table.spec is spec or table.spec == spec):
        return table
    with _TABLES_LOCK:
        table = _TABLES.get(spec.name)
        if table is None or table.spec != spec:
            table = _TABLES[spec.name] = FamilyTable(spec)
        return table
