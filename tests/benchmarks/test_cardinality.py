"""benchmarks/cardinality.py: each setting changes only its own families, labels that are
new on every node are told from those that are not, the defaults follow the stated rule,
and docs/scale.md's section holds what the benchmark measures now."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks.cardinality import (
    BEGIN,
    END,
    PROFILES,
    Cardinality,
    LabelGrowth,
    SettingRow,
    label_growth,
    measure_settings,
    rule_share_per_node,
)
from benchmarks.cardinality_section import _chosen, section
from benchmarks.common import section_of
from benchmarks.scale_bench import with_cardinality

SCALE_MD = Path(__file__).resolve().parents[2] / "docs" / "scale.md"
# NVLinks per GPU (hardware facts): H100 18, A100 12, V100 6
LINKS = {"dgx-h100": 18, "dgx-a100": 12, "dgx1-v100": 6}


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, str], SettingRow]:
    measured = measure_settings(tmp_path_factory.mktemp("cardinality"))
    return {(r.profile, r.nvlink_detail, r.ib_hw_counters): r for r in measured}


@pytest.mark.parametrize("profile", PROFILES)
def test_each_setting_changes_its_own_families_only(
    rows: dict[tuple[str, str, str], SettingRow], profile: str
) -> None:
    link, gpu = rows[(profile, "link", "default")], rows[(profile, "gpu", "default")]
    every = rows[(profile, "link", "all")]
    assert link.ceiling - gpu.ceiling == link.nvlink - gpu.nvlink > 0
    assert gpu.infiniband == link.infiniband
    assert every.ceiling - link.ceiling == every.infiniband - link.infiniband > 0
    assert every.nvlink == link.nvlink
    # per link, the NVLink families have a series for each of a GPU's links
    assert link.nvlink % (link.gpus * LINKS[profile]) == 0
    # per GPU, one for each GPU
    assert gpu.nvlink % gpu.gpus == 0 and gpu.nvlink < link.nvlink


@pytest.fixture(scope="module")
def growth(tmp_path_factory: pytest.TempPathFactory) -> list[LabelGrowth]:
    return label_growth(tmp_path_factory.mktemp("labels"))


def test_serials_uuids_and_guids_are_new_on_every_node_indexes_are_not(
    growth: list[LabelGrowth],
) -> None:
    by_label = {g.label: g for g in growth}
    for label in ("uuid", "serial", "node_guid"):
        assert by_label[label].own_per_node == by_label[label].values_per_node == 8, label
    for label in ("gpu", "link", "pci_bus_id", "device", "port"):
        assert by_label[label].own_per_node == 0, label
    assert by_label["gpu"].values_per_node == 8


def test_the_default_is_the_most_detail_one_server_holds() -> None:
    h100 = {
        ("link", "default"): SettingRow("dgx-h100", "link", "default", 8, 2_000, 1_000, 100),
        ("gpu", "default"): SettingRow("dgx-h100", "gpu", "default", 8, 1_000, 50, 100),
    }
    # 64 GiB at 1,000 MB per 100k series: 6.7 M series
    assert _chosen(1_000, h100, 1_000.0)[0] == ("link", "default")
    assert _chosen(5_000, h100, 1_000.0)[0] == ("gpu", "default")
    sharded = _chosen(10_000, h100, 1_000.0)
    assert sharded[0] == ("gpu", "default") and "more than one server" in sharded[1]
    assert _chosen(1_000, h100, None) == (None, "")
    # and whose costliest rule group stays within 10% of its interval: 17% at 1,000
    # nodes per link is 2.1% at 124, 1% per GPU
    shares = {"link": 0.17 / 1_000, "gpu": 0.01 / 1_000}
    assert _chosen(124, h100, 1_000.0, shares)[0] == ("link", "default")
    assert _chosen(1_000, h100, 1_000.0, shares)[0] == ("gpu", "default")
    assert "more than one server" in _chosen(20_000, h100, 1_000.0, shares)[1]


def test_rule_shares_come_from_the_thousand_node_runs(tmp_path: Path) -> None:
    def figures(detail: str, nodes: int, seconds: list[float]) -> str:
        rules = [{"group": f"g{k}", "seconds": s, "interval_s": 60.0}
                 for k, s in enumerate(seconds)]  # fmt: skip
        prometheus = {"prometheus": {"rules": rules}}
        return json.dumps({"nvlink_detail": detail, "nodes": nodes, "engines": prometheus})

    (tmp_path / "scale-thousand.json").write_text(figures("gpu", 1_000, [1.2, 3.0]))
    (tmp_path / "scale-thousand-link.json").write_text(figures("link", 500, [6.0, 0.5]))
    (tmp_path / "other.json").write_text("{}")
    shares = rule_share_per_node(tmp_path)
    assert shares == pytest.approx({"gpu": 0.05 / 1_000, "link": 0.1 / 500})


def test_the_committed_section_holds_the_measured_figures(
    rows: dict[tuple[str, str, str], SettingRow],
) -> None:
    committed = section_of(SCALE_MD.read_text(encoding="utf-8"), BEGIN, END)
    assert committed is not None, "docs/scale.md has no cardinality section"
    row = re.compile(r"^\| `([\w-]+)` \| (link|gpu) \| (default|all) \| ([\d,]+) \|", re.M)
    table = row.findall(committed)
    assert {(p, d, c): int(n.replace(",", "")) for p, d, c, n in table} == {
        key: row.ceiling for key, row in rows.items()
    }


def test_the_scale_benchmark_keeps_the_section(tmp_path: Path) -> None:
    out = tmp_path / "scale.md"
    out.write_text(f"# old\n\n{BEGIN}\nkept\n{END}\n", encoding="utf-8")
    assert f"{BEGIN}\nkept\n{END}" in with_cardinality(out, "# new run\n")
    assert with_cardinality(tmp_path / "absent.md", "# new run\n") == "# new run\n"


def test_the_section_renders_from_a_run(
    rows: dict[tuple[str, str, str], SettingRow], growth: list[LabelGrowth]
) -> None:
    result = Cardinality(list(rows.values()), growth, 1_933.0, 360.0, 515.0, 1.0)
    text = section(result, "python -m benchmarks.cardinality")
    assert text.startswith(BEGIN) and text.rstrip().endswith(END)
    assert "| 1,000 | `--nvlink-detail link` |" in text
