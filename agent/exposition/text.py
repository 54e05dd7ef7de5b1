"""FamilySets -> exposition bytes, text 0.0.4 or OpenMetrics, from the slot table.

Each family is its header (computed once, agent/exposition/slots.py) and, per series, the
slot's cached prefix and the value formatted by prometheus_client's own floatToGoString.
A slot also keeps its last line: a value unchanged since the last poll (an info family's
1, a limit, an error counter at 0) is not formatted again. Both formats write the same
sample lines for our families (plain names, no timestamps, no exemplars, no _created);
they differ only in headers and OpenMetrics' closing `# EOF`. tests/agent/test_render_*.py
hold the bytes equal to prometheus_client's for every simulated profile and scenario.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from prometheus_client.utils import floatToGoString

from nvwatch.agent.exposition.families import FamilySet

# prometheus_client's value formatting, reused rather than rewritten (Go's float text:
# +Inf, NaN, exponents from 1e+21). Typed here once: the library leaves it untyped.
format_value: Callable[[float], str] = floatToGoString

_copysign = math.copysign


def render_text(parts: Iterable[FamilySet]) -> bytes:
    """Prometheus text format 0.0.4, families in the order given."""
    out: list[str] = []
    for part in parts:
        _render(part, out, openmetrics=False)
    return "".join(out).encode("utf-8")


def render_openmetrics(parts: Iterable[FamilySet]) -> bytes:
    """OpenMetrics 1.0.0 text, families in the order given, ending with # EOF."""
    out: list[str] = []
    for part in parts:
        _render(part, out, openmetrics=True)
    out.append("# EOF\n")
    return "".join(out).encode("utf-8")


def _render(part: FamilySet, out: list[str], *, openmetrics: bool) -> None:
    append = out.append
    for family in part.families():
        table = family.table
        append(table.header_openmetrics if openmetrics else table.header_text)
        for slot, value in zip(family.slots, family.values, strict=True):
            last, line = slot.memo
            # 0.0 == -0.0 but they print differently; NaN equals nothing, so it is
            # always formatted
            if value == last and (value or _copysign(1.0, value) == _copysign(1.0, last)):
                append(line)
                continue
            line = slot.prefix + format_value(value) + "\n"
            slot.memo = (value, line)
            append(line)
