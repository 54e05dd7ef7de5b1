"""A report query the server refuses for its samples is asked in parts of its range, and
the parts put end to end are the answer: checked against a real Prometheus whose
--query.max-samples refuses the whole range, step by step against its instant answers."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from nvwatch.common.http_connection import Connection
from nvwatch.report.errors import QueryTimedOut, ReportError, TooManySamples
from nvwatch.report.fetch import split_range
from nvwatch.report.prom import PrometheusClient, RangeResult, rejection
from nvwatch.sim.tsdb.block import BlockWriter
from nvwatch.sim.tsdb.xor import Grid
from tests.prometheus_on_blocks import prometheus_on

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
STEP_S = 30
SAMPLES = 240  # two hours
PORTS = 40
# the whole range's points before the sum (40 series x 120 steps) are over this limit;
# a quarter of the range is under it
MAX_SAMPLES = 2_000
EXPR = "sum by (instance) (max_over_time(port_errors_total[1m]))"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    work = tmp_path_factory.mktemp("split")
    writer = BlockWriter(work / "data", Grid(START_MS, STEP_S * 1000, SAMPLES))
    rng = np.random.default_rng(3)
    labels = [(("__name__", "port_errors_total"), ("instance", f"n{k % 4}"), ("port", str(k)))
              for k in range(PORTS)]  # fmt: skip
    writer.add(labels, np.cumsum(rng.integers(0, 5, (PORTS, SAMPLES)), axis=1).astype(float))
    writer.close()
    with prometheus_on(work / "data", work, f"--query.max-samples={MAX_SAMPLES}") as url:
        yield url


def test_the_parts_of_a_refused_range_are_its_steps_answers(prometheus: str) -> None:
    client = PrometheusClient(Connection(prometheus))
    first = START_MS / 1000 + 60
    last = first + (SAMPLES // 2 - 2) * 60  # every step's window inside the data
    with pytest.raises(TooManySamples, match="too many samples"):
        client.query_range(EXPR, first, last, 60)
    sent: list[float] = []
    whole = split_range(client, EXPR, first, last, 60, sent)
    assert len(sent) > 2 and sent[0] == first  # the refused whole range, then its parts
    got = {labels["instance"]: values for labels, values in whole.series}
    assert sorted(got) == ["n0", "n1", "n2", "n3"]
    steps = [first + 60 * k for k in range(SAMPLES // 2 - 1)]
    for values in got.values():
        assert [t for t, _ in values] == pytest.approx(steps)  # each step once, in order
    for at in steps[::7]:
        for labels, (_, value) in client.query(EXPR, at):
            assert dict(got[labels["instance"]])[at] == value


class _Refusing(PrometheusClient):
    """Refuses any range of more than `most` steps (for its samples, or by timing out);
    answers one series, the step times."""

    def __init__(self, most: int, refusal: ReportError | None = None) -> None:
        self.most = most
        self.refusal = refusal or TooManySamples("Prometheus rejected x: too many samples")
        self.answered: list[tuple[float, float]] = []

    def query_range(self, expr: str, start: float, end: float, step: float) -> RangeResult:
        if (end - start) / step + 1 > self.most:
            raise self.refusal
        self.answered.append((start, end))
        points = [[start + step * k, "1"] for k in range(round((end - start) / step) + 1)]
        return RangeResult([({"instance": "n"}, points)])


def test_halving_covers_every_step_once() -> None:
    client = _Refusing(most=3)
    result = split_range(client, "x", 0.0, 990.0, 10.0)
    ((_, points),) = result.series
    assert [t for t, _ in points] == [10.0 * k for k in range(100)]
    # the parts answered: each within the limit, end to end
    assert all((end - start) / 10 + 1 <= 3 for start, end in client.answered)
    assert [s for s, _ in client.answered[1:]] == [e + 10 for _, e in client.answered[:-1]]


def test_a_single_step_still_refused_is_the_one_line_error() -> None:
    with pytest.raises(ReportError, match="too many samples"):
        split_range(_Refusing(most=0), "x", 0.0, 90.0, 10.0)


def test_victoria_metrics_refusing_a_subquery_s_points_is_split_too() -> None:
    """VictoriaMetrics' answer to a month's subquery at the rules' minute (its words, as
    a 1,000-node benchmark run met them): a range to split, not a failure."""
    message = (
        'cannot execute query: cannot evaluate "avg_over_time((x > bool 0)[1h:1m])": too '
        "many points for the given step=60000, start=1793390040000 and end=1795982460000: "
        "43208; cannot exceed -search.maxPointsPerTimeseries=30000"
    )
    assert isinstance(rejection("avg_over_time((x > bool 0)[1h:1m])", message), TooManySamples)
    assert not isinstance(rejection("x", "parse error: unexpected end"), TooManySamples)


TIMED_OUT = QueryTimedOut("Prometheus at x did not answer within 120 s (--timeout): x")


def test_a_range_that_timed_out_is_asked_again_in_two_halves() -> None:
    # a month at an hour: 720 steps too slow for the timeout, 360 within it
    client = _Refusing(most=360, refusal=TIMED_OUT)
    sent: list[float] = []
    result = split_range(client, "x", 3600.0, 720 * 3600.0, 3600.0, sent)
    ((_, points),) = result.series
    assert [t for t, _ in points] == [3600.0 * k for k in range(1, 721)]
    assert client.answered == [(3600.0, 360 * 3600.0), (361 * 3600.0, 720 * 3600.0)]
    assert sent == [3600.0, 3600.0, 361 * 3600.0]


def test_a_half_that_times_out_too_is_the_one_line_error() -> None:
    """A server that answers nothing costs two timeouts (the range, its first half), not
    one per step."""
    client = _Refusing(most=100, refusal=TIMED_OUT)
    sent: list[float] = []
    with pytest.raises(QueryTimedOut, match=r"did not answer within 120 s \(--timeout\)"):
        split_range(client, "x", 3600.0, 720 * 3600.0, 3600.0, sent)
    assert sent == [3600.0, 3600.0] and client.answered == []
