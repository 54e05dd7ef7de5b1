"""The rack GPU power budget setting and its example DGX-1 rack plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from nvwatch.mixin.config import MixinConfig

EXAMPLE = Path(__file__).parents[2] / "deploy" / "mixin.example.yaml"


def test_the_example_rack_plan_budgets_four_dgx1_gpu_sets_per_rack() -> None:
    cfg = MixinConfig.from_yaml(EXAMPLE)
    # four DGX-1 of eight 300 W GPUs: the plan's GPU share, as the example works it out
    assert cfg.rack_gpu_power_budget_watts("rack-00") == pytest.approx(4 * 8 * 300)
    assert cfg.rack_gpu_power_budget_watts("rack-07") == pytest.approx(2 * 8 * 300)


def test_no_plan_means_no_budget() -> None:
    assert MixinConfig().rack_gpu_power_budget_watts("rack-00") is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([9.6], "expected a mapping of rack to kW"),
        ({"rack-01": 0}, "rack_gpu_power_budgets_kw.rack-01: expected kW > 0"),
        ({"rack-01": "lots"}, "rack_gpu_power_budgets_kw.rack-01: expected kW > 0"),
    ],
)
def test_a_bad_rack_budget_is_named(raw: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        MixinConfig.from_mapping({"rack_gpu_power_budgets_kw": raw})


def test_the_default_budget_must_be_a_number() -> None:
    with pytest.raises(ValueError, match="rack_gpu_power_budget_kw: expected a number"):
        MixinConfig.from_mapping({"rack_gpu_power_budget_kw": "9.6 kW"})
