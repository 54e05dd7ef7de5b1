"""deploy/scale/scrape.yml, every vmagent shard's scrape config, scrapes what one
Prometheus of deploy/prometheus does: the agents and, through the management host's
nvwatch, the nodes' BMCs (without them a fleet on VictoriaMetrics has no node power,
inlet air or fans, and the report's BMC figures are empty)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from nvwatch.mixin.config import MixinConfig

DEPLOY = Path(__file__).parents[2] / "deploy"


def _jobs(path: Path) -> dict[str, dict[str, Any]]:
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    return {job["job_name"]: job for job in config["scrape_configs"]}


def test_the_shards_scrape_the_jobs_of_one_prometheus() -> None:
    shards = _jobs(DEPLOY / "scale" / "scrape.yml")
    one = _jobs(DEPLOY / "prometheus" / "prometheus.yml")
    assert list(shards) == list(one)
    for name, job in shards.items():
        expected = copy.deepcopy(one[name])
        for file_sd in expected["file_sd_configs"]:
            del file_sd["refresh_interval"]  # vmagent rejects it: a flag sets it there
        assert job == expected, name


def test_the_jobs_are_the_mixin_s_selectors() -> None:
    cfg = MixinConfig()
    names = {f'job="{name}"' for name in _jobs(DEPLOY / "scale" / "scrape.yml")}
    assert names == {cfg.job_selector, cfg.bmc_job_selector}
