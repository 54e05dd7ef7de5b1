"""The straggler corpus: planned the same for the same seed, and its truth is what its
series show.

A two-node episode with one GPU slowed by 40 % from minute 5 is generated and read back
from the OpenMetrics file: from the onset the culprit's SM clock is 40 % below its
maximum while every other rank's is at it, and the other ranks stay busy (utilization
high) while they draw less power than before the onset (they wait in NCCL).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import defaultdict
from pathlib import Path

import pytest

from nvwatch.sim.stragglers.corpus import generate
from nvwatch.sim.stragglers.episodes import (
    LEGITIMATE,
    STRAGGLER,
    STRAGGLER_CAUSES,
    Culprit,
    EpisodePlan,
    plan_corpus,
)

STEP_S = 15.0
ONSET_S = 300.0
SLOWDOWN = 0.4
_LINE = re.compile(r"^(\w+)\{(.*)\} (\S+) (\S+)$")
_LABEL = re.compile(r'(\w+)="([^"]*)"')

Series = dict[tuple[str, str, str], list[tuple[float, float]]]  # (family, instance, gpu)


def read_series(path: Path) -> Series:
    found: Series = defaultdict(list)
    for line in path.read_text(encoding="utf-8").splitlines():
        match = _LINE.match(line)
        if not match:
            continue
        labels = dict(_LABEL.findall(match.group(2)))
        key = (match.group(1), labels.get("instance", ""), labels.get("gpu", ""))
        if key[0] == "nvwatch_gpu_clock_hertz" and labels.get("clock") != "sm":
            continue
        found[key].append((float(match.group(4)), float(match.group(3))))
    return found


def mean(points: list[tuple[float, float]], t0: float, t1: float) -> float:
    values = [v for t, v in points if t0 <= t < t1]
    assert values, "no samples in the window"
    return sum(values) / len(values)


@pytest.fixture(scope="module")
def slow_gpu_corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    plan = EpisodePlan(
        0, STRAGGLER, "dgx-h100", 2, 1200.0, seed=5, scenario="gpu-slow",
        slowdown=SLOWDOWN, onset_s=ONSET_S, culprit=Culprit(1, 3),
    )  # fmt: skip
    out = tmp_path_factory.mktemp("corpus")
    generate([plan], out, seed=5, step=STEP_S)
    return out


def test_the_same_seed_plans_the_same_corpus_and_covers_every_case() -> None:
    first = plan_corpus(7, 28, max_nodes=4)
    assert first == plan_corpus(7, 28, max_nodes=4)
    assert first != plan_corpus(8, 28, max_nodes=4)
    stragglers = [p for p in first if p.kind == STRAGGLER]
    assert {p.scenario for p in stragglers} == set(STRAGGLER_CAUSES)
    assert {p.kind for p in first} - {STRAGGLER} == set(LEGITIMATE)
    assert all(2 <= p.nodes <= 4 for p in first if p.kind != "single-gpu")
    for p in stragglers:
        assert p.slowdown is None or 0.05 <= p.slowdown <= 0.6
        assert p.onset_s is not None and p.onset_s <= p.seconds - 1500


def test_small_jobs_are_the_most_likely() -> None:
    sizes = [p.nodes for p in plan_corpus(3, 200) if p.kind != "single-gpu"]
    assert sizes.count(2) > sizes.count(4) > sizes.count(8)
    assert max(sizes) <= 32


def test_truth_names_the_culprit_and_the_series_show_it(slow_gpu_corpus: Path) -> None:
    truth = json.loads((slow_gpu_corpus / "truth.json").read_text())
    (episode,) = truth["episodes"]
    assert episode["culprit"] == {"instance": "ep000-n01", "gpu": "3", "device": None, "port": None}
    assert episode["cause"] == "clock-other" and episode["alert_expected"]
    onset = episode["onset"]
    assert onset == episode["start"] + ONSET_S
    series = read_series(slow_gpu_corpus / "corpus.om")
    after = (onset + 120, episode["end"] + 1)
    before = (episode["start"] + 60, onset)
    clock = {k[1:]: mean(v, *after) for k, v in series.items() if k[0] == "nvwatch_gpu_clock_hertz"}
    top = max(clock.values())
    assert clock[("ep000-n01", "3")] == pytest.approx((1 - SLOWDOWN) * top, rel=0.02)
    assert all(v == top for k, v in clock.items() if k != ("ep000-n01", "3"))
    for (family, instance, gpu), points in series.items():
        if family != "nvwatch_gpu_utilization_ratio" or (instance, gpu) == ("ep000-n01", "3"):
            continue
        assert mean(points, *after) >= 0.85
        power = series["nvwatch_gpu_power_watts", instance, gpu]
        assert mean(power, *after) < 0.9 * mean(power, *before)
    allocated = {k[1:] for k in series if k[0] == "nvwatch_gpu_allocation_info"}
    assert len(allocated) == 16


def test_a_seed_writes_the_same_bytes(slow_gpu_corpus: Path, tmp_path: Path) -> None:
    plan = EpisodePlan(
        0, STRAGGLER, "dgx-h100", 2, 1200.0, seed=5, scenario="gpu-slow",
        slowdown=SLOWDOWN, onset_s=ONSET_S, culprit=Culprit(1, 3),
    )  # fmt: skip
    generate([plan], tmp_path, seed=5, step=STEP_S)
    for name in ("corpus.om", "truth.json"):
        digest = hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()
        assert digest == hashlib.sha256((slow_gpu_corpus / name).read_bytes()).hexdigest()
