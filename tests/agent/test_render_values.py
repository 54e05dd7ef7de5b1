"""The renderer's values, label values and headers against prometheus_client's, one by one.

tests/agent/test_render_identity.py compares whole expositions; this file aims at the
corners a simulated node rarely reaches: Go float formatting (+Inf, NaN, -0.0, 2**53+1,
exponents from 1e+21), a value that changes sign or comes back between polls while the
slot keeps its last line, label values that need escaping, HELP text that needs escaping.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Sequence

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as generate_openmetrics
from prometheus_client.utils import floatToGoString

from nvwatch.agent.catalogue import BY_NAME, MetricSpec, MetricType, Scope, Series
from nvwatch.agent.exposition import slots
from nvwatch.agent.exposition.families import FamilySet
from nvwatch.agent.exposition.render import registry_of
from nvwatch.agent.exposition.text import render_openmetrics, render_text

VALUES: tuple[float, ...] = (
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    1 / 3,
    1e-7,
    5e-324,
    123456.0,
    1234567.0,
    12345678.9,
    1e15,
    1e16,
    2.0**53,
    float(2**53 + 1),
    float(2**64),
    1e21,
    1e22,
    -1e21,
    1.7976931348623157e308,
    math.inf,
    -math.inf,
    math.nan,
)
ODD_LABELS = ("", "plain", 'quo"te', "back\\slash", "new\nline", '\\"\n', "ü ñ 漢", "a=b,c}")


def _spec(name: str, kind: MetricType, help_text: str = "A test family.") -> MetricSpec:
    return MetricSpec(name, kind, help_text, Scope.SOURCE, "tests", (Series(1.0),))


GAUGE = _spec("nvwatch_test_render_seconds", MetricType.GAUGE)
COUNTER = _spec("nvwatch_test_render_bytes_total", MetricType.COUNTER)


def _reference(sets: Sequence[FamilySet]) -> tuple[bytes, bytes]:
    registry = registry_of([family for s in sets for family in s])
    return generate_latest(registry), generate_openmetrics(registry)  # type: ignore[no-untyped-call]


def _assert_like_prometheus_client(sets: Sequence[FamilySet]) -> None:
    text, openmetrics = _reference(sets)
    assert render_text(sets) == text
    assert render_openmetrics(sets) == openmetrics


def test_every_value_formats_as_float_to_go_string() -> None:
    out = FamilySet()
    for i, value in enumerate(VALUES):
        out.add_sample(GAUGE, (str(i),), value)
        out.add_sample(COUNTER, (str(i),), value)
    out.add_sample(GAUGE, ("int",), 2**53 + 1)  # an int from a source: float64 on the wire
    out.add_sample(GAUGE, ("bool",), True)
    _assert_like_prometheus_client([out])


def test_a_slot_reformats_whenever_its_value_changes() -> None:
    """The slot keeps its last line between polls: 0.0 -> -0.0 must still print -0.0,
    NaN must never be taken for the previous NaN's line (it equals nothing anyway)."""
    sequence = (*VALUES, *reversed(VALUES), 0.0, 0.0, -0.0, -0.0, 0.0, math.nan, math.nan, 1.0)
    kept = []  # every poll's set stays alive, as the previous exposition does in the agent
    for value in sequence:
        out = FamilySet()
        out.add_sample(GAUGE, ("x",), value)
        kept.append(out)
        line = render_text([out]).decode().splitlines()[-1]
        assert line == f'nvwatch_test_render_seconds{{source="x"}} {floatToGoString(value)}'
    slots_used = {id(family.slots[0]) for out in kept for family in out.families()}
    assert len(slots_used) == 1, "one series, one slot from poll to poll"


@pytest.mark.parametrize("value", ODD_LABELS)
def test_label_values_are_escaped_as_prometheus_client_does(value: str) -> None:
    out = FamilySet()
    out.add_sample(GAUGE, (value,), 1.0)
    info = BY_NAME["nvwatch_gpu_info"]
    out.add_sample(info, ("0", value, value, "b", value, "d", "e", value), 1.0)
    _assert_like_prometheus_client([out])


def test_escape_is_the_rule_of_the_installed_prometheus_client() -> None:
    # its own function is private and changed signature across releases: compare the
    # rule with whichever this release has, through its renderer
    for value in ODD_LABELS:
        out = FamilySet()
        out.add_sample(GAUGE, (value,), 1.0)
        expected_line = _reference([out])[0].decode().splitlines()[-1]
        assert expected_line == f'{GAUGE.name}{{source="{slots.escape_label_value(value)}"}} 1.0'


def test_headers_escape_help_and_carry_units_like_prometheus_client() -> None:
    odd = 'Help with a backslash \\ a "quote" and a\nnewline.'
    sets = []
    for kind, name in (
        (MetricType.GAUGE, "nvwatch_test_render_odd_help_ratio"),
        (MetricType.COUNTER, "nvwatch_test_render_odd_help_total"),
        (MetricType.COUNTER, "nvwatch_test_render_odd_help_joules_total"),
    ):
        out = FamilySet()
        out.add_sample(_spec(name, kind, odd), ("s",), 2.5)
        out.declare(_spec(name.replace("odd_help", "declared"), kind, odd))
        sets.append(out)
    _assert_like_prometheus_client(sets)
    assert b"# UNIT nvwatch_test_render_odd_help_joules joules\n" in render_openmetrics(sets)


def test_every_catalogue_family_has_prometheus_client_headers() -> None:
    out = FamilySet()
    for spec in BY_NAME.values():
        out.declare(spec)
    _assert_like_prometheus_client([out])


def test_empty_exposition() -> None:
    _assert_like_prometheus_client([])
    _assert_like_prometheus_client([FamilySet()])


def test_names_prometheus_client_would_escape_are_refused() -> None:
    out = FamilySet()
    with pytest.raises(ValueError, match="plain Prometheus name"):
        out.add_sample(_spec("nvwatch:test_render", MetricType.GAUGE), ("s",), 1.0)


def test_label_values_must_match_the_label_names() -> None:
    out = FamilySet()
    with pytest.raises(ValueError, match="label values"):
        out.add_sample(GAUGE, ("a", "b"), 1.0)


def test_agents_on_threads_sharing_slots_render_their_own_values() -> None:
    """A simulated fleet runs many agents in one process: identical label sets share one
    slot, and its last line, between threads. Each must still render its own values."""
    mismatches: list[str] = []

    def agent(seed: int) -> None:
        for poll in range(150):
            out = FamilySet()
            for series in range(40):
                value = float((poll * (seed + 1) + series) % 5 - 2)
                out.add_sample(GAUGE, (str(series),), -0.0 if value == 0 and seed % 2 else value)
            if render_text([out]) != _reference([out])[0]:
                mismatches.append(f"agent {seed} poll {poll}")

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # hand the GIL over as often as possible
    try:
        threads = [threading.Thread(target=agent, args=(seed,)) for seed in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sys.setswitchinterval(interval)
    assert mismatches == []
