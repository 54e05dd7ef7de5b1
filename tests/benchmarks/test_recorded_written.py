"""The stand-in for the rules' series waits for what vmalert wrote to be answered: on
VictoriaMetrics a slow group's first evaluation shows seconds after it ended, and the
stand-in read before then held none of its series (the report then read the samples)."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchmarks.scale.stack import Stack
from benchmarks.thousand.recorded import held_once_written
from tests.conftest import require_tool
from tests.e2e.loopback import Endpoint
from tests.e2e.service_commands import victoria_metrics_argv

SLOW = {300.0: ["gpu:report_up:max"]}


@pytest.fixture
def victoria_metrics(tmp_path: Path) -> Iterator[str]:
    require_tool("victoria-metrics")
    stack = Stack(tmp_path)
    endpoint = Endpoint.free()
    argv = victoria_metrics_argv(endpoint, tmp_path / "vm-data")
    try:
        stack.spawn("victoria-metrics", argv, f"{endpoint.url}/health")
        yield endpoint.url
    finally:
        stack.close()


def _import(url: str, gpus: list[str], at_s: float) -> None:
    lines = "".join(
        f'{{"metric":{{"__name__":"gpu:report_up:max","gpu":"{gpu}"}},'
        f'"values":[1],"timestamps":[{int(at_s * 1000)}]}}\n'
        for gpu in gpus
    )
    request = urllib.request.Request(f"{url}/api/v1/import", data=lines.encode(), method="POST")
    with urllib.request.urlopen(request, timeout=10):
        pass
    with urllib.request.urlopen(f"{url}/internal/force_flush", timeout=10):
        pass


def test_the_stand_in_waits_until_every_written_series_is_answered(
    victoria_metrics: str,
) -> None:
    # two GPUs' series a minute old; the third written only later, as remote write would
    at = time.time() - 60
    _import(victoria_metrics, ["0", "1"], at)
    late = threading.Timer(3.0, _import, (victoria_metrics, ["2"], at))
    late.start()
    try:
        held = held_once_written(victoria_metrics, SLOW, lambda: {"gpu:report_up:max": 3.0}, 60)
    finally:
        late.join()
    assert sorted(dict(labels)["gpu"] for labels, _ in held) == ["0", "1", "2"]


def test_the_stand_in_says_what_it_waited_for(victoria_metrics: str) -> None:
    _import(victoria_metrics, ["0"], time.time() - 60)
    with pytest.raises(
        AssertionError, match=r"slower rule groups wrote.*held: gpu:report_up:max 1 of 2"
    ):
        held_once_written(victoria_metrics, SLOW, lambda: {"gpu:report_up:max": 2.0}, 3)
