"""The queue & fairness dashboard's queries, evaluated by Prometheus' engine (promtool) on
a modelled cluster: every panel has data, and the panels that combine series show what
the model says. The model is a cluster's Slurm as the scheduler source exports it: two
partitions, two accounts, every reason and state class with its zeros, GPU-seconds
counters that grow with the GPUs each account holds, wait histograms whose jobs started
at a known minute (per partition, and the same jobs per account), fair share. Expected
values come from the model (demand is what the jobs hold plus what the jobs waiting to
start ask for, and so on), not from the queries. The preview's simulated queue
(tests/preview) and a real Slurm (tests/slurm/test_queue_alerts.py) show every panel has
data from the real source too.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvwatch.alerts.recording_scheduler import UNMET
from nvwatch.dashboards.preview import substitute
from nvwatch.mixin.config import MixinConfig
from tests.mixin.conftest import REPO

NAME = "nvwatch-queue.json"
CLUSTER = {"job": "nvwatch", "cluster": "c1", "instance": "slurmctl"}
MINUTES = 70
EVAL_MINUTE = 65
RANGE_MINUTES = 60
# Grafana's variables as on first load (All), with a one-hour range
VARIABLES = {
    "cluster": ".*",
    "partition": ".*",
    "__range": f"{RANGE_MINUTES}m",
    "__range_s": str(RANGE_MINUTES * 60),
    "__interval": "1m",
    "__rate_interval": "5m",
}
PENDING_CLASSES = ("resources", "priority", "limits", "dependency", "held", "other")
NODE_CLASSES = ("not_responding", "drained", "down", "reserved", "other")
NOT_WAITING = ("held", "dependency")
# upper bounds of the modelled wait histograms, seconds
BUCKETS = (60.0, 300.0, 900.0, 3600.0, float("inf"))


@dataclass(frozen=True)
class Partition:
    allocated: int
    idle: int
    unavailable: int
    oldest_wait_s: float
    # GPU jobs that started at `started_minute`, each with its queue wait in seconds
    waits_s: tuple[float, ...]
    started_minute: int
    # the account of each of those jobs
    accounts: tuple[str, ...]
    nodes_out: dict[str, int] = field(default_factory=dict)


PARTITIONS = {
    # fragmented: 4 GPUs idle while an 8-GPU job waits for resources; a node drained
    "a100": Partition(
        24, 4, 8, 2400.0, (600.0,) * 4, 10, ("nlp", "vision", "vision", "vision"), {"drained": 1}
    ),
    # full: every GPU busy
    "h100": Partition(64, 0, 0, 1200.0, (30.0, 30.0, 2000.0, 2000.0), 20, ("nlp",) * 4),
}
# GPUs pending per (partition, account, reason); every other class is 0
PENDING = {
    ("a100", "nlp", "resources"): 8,
    ("a100", "vision", "held"): 4,
    ("h100", "nlp", "resources"): 16,
    ("h100", "vision", "priority"): 8,
}
# GPUs each account's running jobs hold per partition, all along
IN_USE = {("a100", "nlp"): 16, ("a100", "vision"): 8, ("h100", "nlp"): 40, ("h100", "vision"): 24}
# shares_norm, usage_effective, factor
FAIRSHARE = {"nlp": (0.6, 0.7, 0.4), "vision": (0.4, 0.3, 0.6)}
ACCOUNTS = ("nlp", "vision")


def _series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    text = ", ".join(f'{k}="{v}"' for k, v in {**CLUSTER, **labels}.items())
    return {"series": f"{name}{{{text}}}", "values": values}


def _constant(value: float) -> str:
    return f"{value:g}x{MINUTES}"


def _bucket_values(partition: Partition, bound: float) -> str:
    """A cumulative bucket's count: 0 until its jobs started, then how many waited at
    most `bound`."""
    count = sum(1 for wait in partition.waits_s if wait <= bound)
    before = partition.started_minute
    return f"0x{before - 1} {count}x{MINUTES - before}"


def _input_series() -> Iterator[dict[str, str]]:
    for name, p in PARTITIONS.items():
        part = {"partition": name}
        states = {"allocated": p.allocated, "idle": p.idle, "unavailable": p.unavailable}
        for state, gpus in states.items():
            yield _series("nvwatch_scheduler_gpus", {**part, "state": state}, _constant(gpus))
        for reason in NODE_CLASSES:
            nodes = p.nodes_out.get(reason, 0)
            yield _series(
                "nvwatch_scheduler_nodes_unavailable", {**part, "reason": reason}, _constant(nodes)
            )
        yield _series("nvwatch_scheduler_oldest_pending_seconds", part, _constant(p.oldest_wait_s))
        for bound in BUCKETS:
            le = "+Inf" if bound == float("inf") else repr(bound)
            yield _series(
                "nvwatch_scheduler_wait_seconds_bucket",
                {**part, "le": le},
                _bucket_values(p, bound),
            )
        for account in ACCOUNTS:
            key = {**part, "account": account}
            for reason in PENDING_CLASSES:
                gpus = PENDING.get((name, account, reason), 0)
                pending = {**key, "reason": reason}
                yield _series("nvwatch_scheduler_pending_gpus", pending, _constant(gpus))
            per_minute = IN_USE[(name, account)] * 60
            yield _series(
                "nvwatch_scheduler_allocated_gpu_seconds_total", key, f"0+{per_minute}x{MINUTES}"
            )
    for account, kinds in FAIRSHARE.items():
        for kind, value in zip(("shares_norm", "usage_effective", "factor"), kinds, strict=True):
            yield _series(
                "nvwatch_scheduler_fairshare", {"account": account, "kind": kind}, _constant(value)
            )
        for bound in BUCKETS:
            le = "+Inf" if bound == float("inf") else repr(bound)
            yield _series(
                "nvwatch_scheduler_account_wait_seconds_bucket",
                {"account": account, "le": le},
                _account_bucket_values(account, bound),
            )


def _account_bucket_values(account: str, bound: float) -> str:
    """An account's cumulative bucket, minute by minute: its jobs of every partition
    that started by then and waited at most `bound`."""
    return " ".join(
        str(
            sum(
                1
                for p in PARTITIONS.values()
                if p.started_minute <= minute
                for wait, owner in zip(p.waits_s, p.accounts, strict=True)
                if owner == account and wait <= bound
            )
        )
        for minute in range(MINUTES + 1)
    )


def _account_waits(account: str) -> tuple[float, ...]:
    return tuple(
        wait
        for p in PARTITIONS.values()
        for wait, owner in zip(p.waits_s, p.accounts, strict=True)
        if owner == account
    )


def _quantile(q: float, waits: tuple[float, ...]) -> float:
    """Prometheus' histogram_quantile over the modelled buckets: the rank's bucket, and
    linear interpolation inside it (from 0 in the first)."""
    rank = q * len(waits)
    below, lower = 0, 0.0
    for bound in BUCKETS:
        count = sum(1 for wait in waits if wait <= bound)
        if count >= rank:
            return lower + (bound - lower) * (rank - below) / (count - below)
        below, lower = count, bound
    raise AssertionError("the rank is past the last bucket")


def _waiting_for_gpus(partition: str) -> int:
    """Slurm's Resources for the jobs at the head of the queue, Priority behind them."""
    return sum(
        g for (p, _, r), g in PENDING.items() if p == partition and r in ("resources", "priority")
    )


def _waiting(partition: str, account: str) -> int:
    return sum(
        gpus
        for (p, a, reason), gpus in PENDING.items()
        if (p, a) == (partition, account) and reason not in NOT_WAITING
    )


def _expected() -> dict[tuple[str, str], list[tuple[dict[str, str], float]]]:
    """(panel title, refId) -> the series the model says it shows."""
    c1 = {"cluster": "c1"}
    agent = {"cluster": "c1", "instance": "slurmctl"}
    unmet = {n: max(0, _waiting_for_gpus(n) - p.idle) for n, p in PARTITIONS.items()}
    hours = RANGE_MINUTES / 60
    held = {a: hours * sum(g for (_, acc), g in IN_USE.items() if acc == a) for a in ACCOUNTS}
    out = {}
    # a plain selection keeps the series' name
    out[("Unmet GPU demand now, per partition", "A")] = [
        ({"__name__": UNMET, **c1, "partition": n}, float(v)) for n, v in unmet.items()
    ]
    out[("Demand vs capacity per partition", "A")] = [
        ({**c1, "partition": n}, float(p.allocated + p.idle)) for n, p in PARTITIONS.items()
    ]
    out[("Demand vs capacity per partition", "B")] = [
        ({**c1, "partition": n}, float(p.allocated + sum(_waiting(n, a) for a in ACCOUNTS)))
        for n, p in PARTITIONS.items()
    ]
    oldest = "nvwatch_scheduler_oldest_pending_seconds"
    out[("Longest waiting GPU job, per partition", "A")] = [
        ({"__name__": oldest, **CLUSTER, "partition": n}, p.oldest_wait_s)
        for n, p in PARTITIONS.items()
    ]
    out[("GPU-hours per account in the range", "A")] = [
        ({**agent, "account": a}, held[a]) for a in ACCOUNTS
    ]
    out[("Fair share vs use per account", "B")] = [
        ({**agent, "account": a}, held[a] / sum(held.values())) for a in ACCOUNTS
    ]
    out[("GPUs waiting per account", "A")] = [
        ({**agent, "partition": n, "account": a}, float(_waiting(n, a)))
        for n in PARTITIONS
        for a in ACCOUNTS
    ]
    nodes = "nvwatch_scheduler_nodes_unavailable"
    out[("Nodes out of service by reason, per partition", "A")] = [
        ({"__name__": nodes, **CLUSTER, "partition": n, "reason": r}, float(count))
        for n, p in PARTITIONS.items()
        for r, count in p.nodes_out.items()
    ] + [
        ({**CLUSTER, "partition": n, "reason": "none"}, 0.0)
        for n, p in PARTITIONS.items()
        if not p.nodes_out
    ]
    for i, q in enumerate((0.5, 0.9, 0.99)):
        out[("Queue wait percentiles in the range, per partition", chr(ord("A") + i))] = [
            ({**agent, "partition": n}, _quantile(q, p.waits_s)) for n, p in PARTITIONS.items()
        ]
        # the same jobs by account, whatever their partition
        out[("Queue wait percentiles in the range, per account", chr(ord("A") + i))] = [
            ({**agent, "account": a}, _quantile(q, _account_waits(a))) for a in ACCOUNTS
        ]
    return out


def _labels(labels: dict[str, str]) -> str:
    """promtool's form of a result series: its name (if it kept one), then its labels."""
    text = ", ".join(f'{k}="{v}"' for k, v in labels.items() if k != "__name__")
    return f"{labels.get('__name__', '')}{{{text}}}"


def _queries(dashboard: dict[str, Any]) -> dict[tuple[str, str], str]:
    return {
        (panel["title"], target["refId"]): substitute(target["expr"], VARIABLES)
        for panel in dashboard["panels"]
        for target in panel["targets"]
    }


def _run(promtool: str, tmp_path: Path, cases: list[dict[str, Any]]) -> None:
    rules = REPO / "alerts" / "generated" / "nvwatch-recording.yaml"
    series = list(_input_series())
    test = {
        "rule_files": [str(rules)],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": cases}],
    }
    path = tmp_path / "queue.yaml"
    path.write_text(yaml.safe_dump(test), encoding="utf-8")
    result = subprocess.run(
        [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def queries(dashboards: dict[str, dict[str, Any]]) -> dict[tuple[str, str], str]:
    return _queries(dashboards[NAME])


def test_every_panel_has_data_on_the_modelled_cluster(
    promtool: str, queries: dict[tuple[str, str], str], tmp_path: Path
) -> None:
    assert len(queries) >= 20
    cases = [
        {
            "expr": f"count({expr}) > bool 0",
            "eval_time": f"{EVAL_MINUTE}m",
            "exp_samples": [{"labels": "{}", "value": 1}],
        }
        for expr in queries.values()
    ]
    _run(promtool, tmp_path, cases)


def test_the_panels_show_what_the_model_says(
    promtool: str, queries: dict[tuple[str, str], str], tmp_path: Path
) -> None:
    expected = _expected()
    assert expected.keys() <= queries.keys(), sorted(expected.keys() - queries.keys())
    cases = [
        {
            "expr": queries[key],
            "eval_time": f"{EVAL_MINUTE}m",
            "exp_samples": [
                {"labels": _labels(labels), "value": value} for labels, value in samples
            ],
        }
        for key, samples in expected.items()
    ]
    _run(promtool, tmp_path, cases)


def test_the_e2e_stacks_wait_for_the_queue_dashboard_only(
    cfg: MixinConfig, dashboards: dict[str, dict[str, Any]]
) -> None:
    """Without scheduler series the e2e stack skips exactly the queue dashboard's queries
    (every one of them reads the scheduler's series only); with them, nothing is skipped."""
    from tests.e2e.scheduler_panels import waiting

    queries = [
        (name, panel["title"], target["expr"])
        for name, dashboard in dashboards.items()
        for panel in dashboard["panels"]
        for target in panel["targets"]
    ]
    skipped = waiting(queries, cfg, exported=False)
    assert skipped == {q for q in queries if q[0] == NAME}
    assert waiting(queries, cfg, exported=True) == set()
