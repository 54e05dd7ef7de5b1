"""`nvwatch simulate history`: bad input is one line and exit 2; a run writes the history
and its ground truth, with every episode of the plan on its own node and in its week."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from nvwatch.agent.cli import main
from nvwatch.sim.history.scheduler import WAIT_FAMILIES
from tests.conftest import require_tool
from tests.history.backfill import backfill

END = "2026-03-02T00:00:00+00:00"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--nodes", "5"], "at least 6 nodes"),
        (["--nodes", "6", "--step", "7m", "--days", "1"], "whole number of 420s steps"),
        (["--nodes", "6", "--step", "2h"], "invalid step"),
        (["--nodes", "6", "--profile", "geforce-workstation"], "no InfiniBand port"),
        (["--nodes", "6", "--end", "yesterday"], "neither Unix seconds nor an ISO 8601"),
        (["--nodes", "6", "--job", "0-9:all"], "the fleet has nodes 0..5"),
        (["--nodes", "6", "--job", "0-1:all", "--scenario", "1:bogus@2"], "unknown scenario"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    args: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["simulate", "history", "--out", str(tmp_path / "h.om"), *args])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_a_day_of_history_is_valid_openmetrics_with_its_ground_truth(tmp_path: Path) -> None:
    out = tmp_path / "h.om"
    main(["simulate", "history", "--nodes", "6", "--days", "1", "--step", "1h",
          "--end", END, "--out", str(out), "--nodes-per-file", "4"])  # fmt: skip
    parts = sorted(tmp_path.glob("h.*.om"))
    assert [p.name for p in parts] == ["h.000.om", "h.001.om"]
    # the strict parser, on each part: families grouped, each series' samples together
    # (the wait histograms aside: the parser takes the samples of a histogram's second
    # point for duplicates of the first; promtool, below, reads every one)
    samples = [
        [s for f in text_string_to_metric_families(_without(p, WAIT_FAMILIES)) for s in f.samples]
        for p in parts
    ]
    everything = samples[0] + samples[1]
    assert {int(s.timestamp.sec) for s in everything} == {
        1772409600 - 86400 + i * 3600 for i in range(25)
    }  # 2026-03-02T00:00Z is 1772409600
    truth = json.loads((tmp_path / "h.truth.json").read_text())
    assert truth["end"] == 1772409600 and truth["step_seconds"] == 3600
    kinds = {e["kind"]: e for e in truth["episodes"]}
    agents = {"thermal-runaway", "power-capped", "ib-congestion", "ecc-dbe", "agent-down", "idle"}
    assert set(kinds) == agents | {"hot-aisle", "fan-failure", "psu-failure"}
    assert len({kinds[kind]["node"] for kind in agents}) == 6
    # the BMC's episodes share nodes with those, never their time
    for kind in ("fan-failure", "psu-failure"):
        for other in truth["episodes"]:
            if other["node"] == kinds[kind]["node"] and other["kind"] not in (kind, "idle"):
                assert other["end"] <= kinds[kind]["start"] or kinds[kind]["end"] <= other["start"]
    assert kinds["hot-aisle"]["node"] is None and kinds["hot-aisle"]["rack"] == "rack-01"
    instances = [{s.labels["instance"] for s in part} for part in samples]
    controller = truth["scheduler"]["instance"]
    assert [len(i) for i in instances] == [4, 3] and controller in instances[1]
    assert set.union(*instances) == {n["instance"] for n in truth["nodes"]} | {controller}
    classes = {s.labels["node_class"] for s in everything if s.labels["instance"] != controller}
    assert classes == {"dgx1-v100", "dgx-a100", "dgx-h100"}
    # promtool backfills every part, the histograms' points included
    counts: dict[tuple[str, str], int] = {}
    for part in parts:
        tsdb = tmp_path / f"{part.stem}.tsdb"
        backfill(part, tsdb, 1.0)
        (tsdb / "wal").mkdir()  # what `tsdb dump` opens beside the blocks
        dumped = subprocess.run(
            [require_tool("promtool"), "tsdb", "dump", str(tsdb)],
            capture_output=True, text=True, check=True, timeout=120,
        ).stdout  # fmt: skip
        for family in WAIT_FAMILIES:
            counts[part.name, family] = dumped.count(f'__name__="{family}_')
    for family in WAIT_FAMILIES:
        lines = sum(part.read_text().count(f"\n{family}_") for part in parts)
        assert counts["h.000.om", family] == 0 and counts["h.001.om", family] == lines > 0


def _without(path: Path, families: tuple[str, ...]) -> str:
    """The OpenMetrics text of `path` less those families' blocks."""
    return _blocks(path, lambda name: name not in families)


def _only(path: Path, families: tuple[str, ...]) -> str:
    """The OpenMetrics text of `path` with those families' blocks alone."""
    return _blocks(path, lambda name: name in families)


def _blocks(path: Path, keep: Callable[[str], bool]) -> str:
    blocks = path.read_text().removesuffix("# EOF\n").split("# HELP ")
    kept = [b for b in blocks[1:] if keep(b.split(" ", 1)[0])]
    return "".join(f"# HELP {b}" for b in kept) + "# EOF\n"


def test_a_synchronous_job_in_a_history_waits_for_its_slowed_rank(tmp_path: Path) -> None:
    """Two nodes run one job; one GPU of the second runs 30 % slower. In the history its
    SM clock is the job's lowest, and every other rank of the job waits: busy, at less
    power than the same model's GPUs training outside any job (profiles repeat every
    third node, so node 3 is node 0's twin)."""
    out = tmp_path / "h.om"
    main(["simulate", "history", "--nodes", "6", "--days", "0.0125", "--step", "15s",
          "--end", END, "--out", str(out), "--job", "0-1:all,id=77",
          "--scenario", "1:gpu-slow@2,slowdown=0.3"])  # fmt: skip
    last: dict[tuple[str, str, str], float] = {}
    held: set[tuple[str, str]] = set()
    read = ("allocation_info", "clock_hertz", "utilization_ratio", "power_watts")
    wanted = tuple(f"nvwatch_gpu_{name}" for name in read)
    for family in text_string_to_metric_families(_only(out, wanted)):
        for sample in family.samples:
            where = (sample.labels.get("instance", ""), sample.labels.get("gpu", ""))
            if family.name == "nvwatch_gpu_allocation_info" and sample.labels["job_id"] == "77":
                held.add(where)
            if sample.labels.get("clock", "sm") == "sm":
                last[sample.name, where[0], where[1]] = sample.value

    def value(name: str, gpu: tuple[str, str]) -> float:
        return last[name, gpu[0], gpu[1]]

    nodes = sorted({instance for instance, _ in held})
    assert len(nodes) == 2 and len(held) == 16
    culprit = (nodes[1], "2")
    clocks = {gpu: value("nvwatch_gpu_clock_hertz", gpu) for gpu in held}
    assert min(clocks, key=clocks.__getitem__) == culprit
    peers = [gpu for gpu in held if gpu[0] == culprit[0] and gpu != culprit]
    assert clocks[culprit] < 0.8 * min(clocks[gpu] for gpu in peers)
    waiting = [gpu for gpu in held if gpu[0] == nodes[0]]
    assert all(value("nvwatch_gpu_utilization_ratio", gpu) >= 0.85 for gpu in waiting)
    twin = [(nodes[0].replace("000", "003"), gpu) for _, gpu in waiting]
    outside = sum(value("nvwatch_gpu_power_watts", gpu) for gpu in twin)
    assert sum(value("nvwatch_gpu_power_watts", gpu) for gpu in waiting) < 0.9 * outside
