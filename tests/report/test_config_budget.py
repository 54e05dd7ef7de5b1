"""The rack power budget settings (the whole rack's circuit, and its GPU share) and their
example DGX-1 rack plan."""

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


def test_the_example_circuit_is_the_gpu_share_plus_each_dgx1s_other_800_watts() -> None:
    """A DGX-1 is 3.2 kW, 2.4 kW of it its GPUs: a rack of four DGX-1 plans 12.8 kW, and
    rack-07 with two 6.4 kW; what is not GPU is 0.8 kW a node in both."""
    cfg = MixinConfig.from_yaml(EXAMPLE)
    for rack, nodes in (("rack-00", 4), ("rack-07", 2)):
        circuit = cfg.rack_power_budget_watts(rack)
        gpus = cfg.rack_gpu_power_budget_watts(rack)
        assert circuit == pytest.approx(nodes * 3200)
        assert gpus is not None and circuit - gpus == pytest.approx(nodes * 800)


def test_no_plan_means_no_budget() -> None:
    assert MixinConfig().rack_gpu_power_budget_watts("rack-00") is None
    assert MixinConfig().rack_power_budget_watts("rack-00") is None


@pytest.mark.parametrize("key", ["rack_gpu_power_budgets_kw", "rack_power_budgets_kw"])
@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ([9.6], "{key}: expected a mapping of rack to kW"),
        ({"rack-01": 0}, "{key}.rack-01: expected kW > 0"),
        ({"rack-01": "lots"}, "{key}.rack-01: expected kW > 0"),
        ({"rack-01": True}, "{key}.rack-01: expected kW > 0"),
    ],
)
def test_a_bad_rack_budget_is_named(key: str, raw: object, message: str) -> None:
    with pytest.raises(ValueError, match=message.format(key=key)):
        MixinConfig.from_mapping({key: raw})


@pytest.mark.parametrize("key", ["rack_gpu_power_budget_kw", "rack_power_budget_kw"])
def test_the_default_budget_must_be_a_number(key: str) -> None:
    with pytest.raises(ValueError, match=f"{key}: expected a number"):
        MixinConfig.from_mapping({key: "9.6 kW"})
