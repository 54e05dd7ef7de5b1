"""Fair share read from a real Slurm with real accounting (slurmdbd and MariaDB).

One cluster for the file (cluster.py, accounting.py): two accounts, physics with 70 raw
shares and biology with 30, root a user of both; beside them chemistry, whose only user is
in its sub-account chem-lab, and idle, with no user at all. GPU time is billed four times a CPU's
(the partition's TRESBillingWeights, as GPU sites do): biology runs a GPU job and physics
a CPU-only one, so biology uses five times what physics does on less than half its
shares. A controller restart charges that usage (accounting.py says why). Every number
read_fairshare returns is compared with what `sshare -l` prints at the same moment,
parsed here by its own fixed-width columns.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nvwatch.agent.exposition.render import prepare
from nvwatch.agent.sources.scheduler.fairshare import FairShare, read_fairshare
from nvwatch.agent.sources.scheduler.source import SchedulerSource
from tests.conftest import require_tool
from tests.slurm.accounting import Account, add_accounts
from tests.slurm.cluster import CLUSTER_NAME, Cluster, slurm_cluster
from tests.slurm.test_real_slurm import _need_slurm

pytestmark = pytest.mark.timeout(300)
SHARES = {"physics": 70, "biology": 30}
# account -> the accounts below it (itself included) whose users' factors it takes
# under Fair Tree, as the fixture builds them
USERS_FROM = {
    "physics": ["physics"],
    "biology": ["biology"],
    "chemistry": ["chem-lab"],
    "chem-lab": ["chem-lab"],
    "idle": [],
}
HEAVY, LIGHT = "biology", "physics"  # the GPU job's account, the CPU job's
GPU_BILLING = 4.0
TIMEOUT_S = 10.0
START_LIMIT_S = 60.0


@dataclass(frozen=True)
class Printed:
    """One row of `sshare -a -l`: the account column's text, its user, and its numbers."""

    account: str
    user: str
    norm_shares: float
    effectv_usage: float
    fair_share: float | None


@pytest.fixture(scope="module")
def accounting_cluster() -> Iterator[Cluster]:
    _need_slurm()
    for tool in ("mariadb-install-db", "mariadbd", "slurmdbd"):
        require_tool(tool)
    started = time.monotonic()
    with slurm_cluster("linuxproc", accounting=True) as cluster:
        print(f"accounting cluster up in {time.monotonic() - started:.1f} s")
        cluster.run(
            "scontrol",
            "update",
            "PartitionName=debug",
            f"TRESBillingWeights=CPU=1.0,GRES/gpu={GPU_BILLING}",
        )
        accounts = [Account(name, shares, ("root",)) for name, shares in SHARES.items()]
        accounts += [Account("chemistry", 10), Account("chem-lab", 1, ("root",), "chemistry")]
        add_accounts(cluster.root, cluster.env, CLUSTER_NAME, [*accounts, Account("idle", 5)])
        _sleeper(cluster, HEAVY, "--gres=gpu:1")
        _sleeper(cluster, LIGHT)
        cluster.wait_for("both jobs running", lambda: _running(cluster) == 2)
        time.sleep(2)  # usage to charge
        cluster.restart_controller()
        cluster.wait_for("usage charged", lambda: _root_raw_usage(cluster) > 0)
        print(f"usage charged {time.monotonic() - started:.1f} s after the start")
        yield cluster


def _sleeper(cluster: Cluster, account: str, *options: str) -> None:
    cluster.run(
        "sbatch", f"--account={account}", "--output=/dev/null", *options, "--wrap=sleep 600"
    )


def _running(cluster: Cluster) -> int:
    return len(cluster.run("squeue", "-h", "-t", "RUNNING", "-o", "%i").split())


def _root_raw_usage(cluster: Cluster) -> int:
    first = cluster.run("sshare", "-h", "-P", "-o", "RawUsage").splitlines()[0]
    return int(first) if first.isdigit() else 0


def printed(cluster: Cluster) -> list[Printed]:
    """`sshare -a -l` parsed by the columns its dashed line marks out."""
    header, dashes, *rows = cluster.run("sshare", "-a", "-l").splitlines()
    spans = [m.span() for m in re.finditer(r"-+", dashes)]
    names = [header[start:end].strip() for start, end in spans]
    table = []
    for line in rows:
        cell = dict(zip(names, (line[start:end] for start, end in spans), strict=True))
        fair_share = cell["FairShare"].strip()
        table.append(
            Printed(
                account=cell["Account"].rstrip(),
                user=cell["User"].strip(),
                norm_shares=float(cell["NormShares"]),
                effectv_usage=float(cell["EffectvUsage"]),
                fair_share=float(fair_share) if fair_share else None,
            )
        )
    return table


def _by_account(shares: tuple[FairShare, ...] | None) -> dict[str, FairShare]:
    assert shares is not None, "an accounting cluster answered as one without accounting"
    return {share.account: share for share in shares}


def test_every_number_is_what_sshare_prints(accounting_cluster: Cluster) -> None:
    ours = _by_account(read_fairshare(TIMEOUT_S, accounting_cluster.env))
    table = printed(accounting_cluster)
    # the cluster's root association is the one row at the left margin: left out
    assert [row.account for row in table if not row.account.startswith(" ")] == ["root"]
    assert set(ours) == set(USERS_FROM)
    for account, share in ours.items():
        (row,) = [r for r in table if r.account.strip() == account and not r.user]
        assert (share.shares_norm, share.usage_effective) == (row.norm_shares, row.effectv_usage)
        # Fair Tree (the default) prints a factor per user, none on the account's row
        assert row.fair_share is None
        users = [r.fair_share for r in table if r.user and r.account.strip() in USERS_FROM[account]]
        assert share.factor == max((f for f in users if f is not None), default=None)
    assert ours["idle"].factor is None


def test_shares_in_the_configured_ratio(accounting_cluster: Cluster) -> None:
    ours = _by_account(read_fairshare(TIMEOUT_S, accounting_cluster.env))
    ratio = ours["physics"].shares_norm / ours["biology"].shares_norm
    assert ratio == pytest.approx(SHARES["physics"] / SHARES["biology"], rel=1e-4)
    assert ours["chem-lab"].shares_norm == 1.0  # the only child of chemistry


def test_the_heavier_account_is_over_its_share_and_ranks_lower(accounting_cluster: Cluster) -> None:
    ours = _by_account(read_fairshare(TIMEOUT_S, accounting_cluster.env))
    heavy, light = ours[HEAVY], ours[LIGHT]
    assert heavy.usage_effective > light.usage_effective
    assert heavy.usage_effective > heavy.shares_norm  # over its share
    assert light.usage_effective < light.shares_norm
    assert heavy.factor is not None and light.factor is not None
    assert heavy.factor < light.factor
    # the accounts that ran jobs hold all of root's usage between them
    assert heavy.usage_effective + light.usage_effective == pytest.approx(1.0, abs=1e-5)
    assert ours["chemistry"].usage_effective == ours["idle"].usage_effective == 0.0


def test_one_read_is_one_controller_rpc(accounting_cluster: Cluster) -> None:
    before = _rpc_counts(accounting_cluster)
    read_fairshare(TIMEOUT_S, accounting_cluster.env)
    after = _rpc_counts(accounting_cluster)
    new = {kind: after[kind] - before.get(kind, 0) for kind in after}
    new["REQUEST_STATS_INFO"] -= 1  # the first sdiag's own
    assert {kind: n for kind, n in new.items() if n} == {"REQUEST_SHARE_INFO": 1}


def _rpc_counts(cluster: Cluster) -> dict[str, int]:
    """sdiag's RPC count per message type."""
    text = cluster.run("sdiag").split("by message type", 1)[1].split("by user", 1)[0]
    return {m[1]: int(m[2]) for m in re.finditer(r"(\w+)\s+\(\s*\d+\) count:(\d+)", text)}


def test_the_scheduler_source_serves_them_beside_the_rest(accounting_cluster: Cluster) -> None:
    """The agent's scheduler source on the same cluster: every fair-share number as a
    series of its account, the configured accounts named, the jobs' GPU-seconds counted."""
    source = SchedulerSource(
        interval=3600.0,
        timeout=TIMEOUT_S,
        max_accounts=50,
        env=accounting_cluster.env,
        fairshare=read_fairshare,
    )
    try:
        sample = source.refresh()
        source.collect()  # up: squeue, sinfo and sshare all read
    finally:
        source.close()
    assert sample is not None
    ours = _by_account(read_fairshare(TIMEOUT_S, accounting_cluster.env))
    families = {family.name: family for family in prepare("scheduler", sample)}
    served = {
        (s.labels["account"], s.labels["kind"]): s.value
        for s in families["nvwatch_scheduler_fairshare"].samples
    }
    assert served == {
        (account, kind): getattr(share, kind)
        for account, share in ours.items()
        for kind in ("shares_norm", "usage_effective", "factor")
        if getattr(share, kind) is not None
    }
    counted = {(d.partition, d.account) for d in sample.demand}
    assert ("debug", HEAVY) in counted  # the GPU job's account; the CPU job's has none


def test_classic_multifactor_prints_the_account_factor_we_keep(
    accounting_cluster: Cluster,
) -> None:
    conf = Path(accounting_cluster.env["SLURM_CONF"])
    fair_tree = conf.read_text()
    conf.write_text(fair_tree + "PriorityFlags=NO_FAIR_TREE\n")
    try:
        accounting_cluster.restart_controller()
        ours = _by_account(read_fairshare(TIMEOUT_S, accounting_cluster.env))
        table = printed(accounting_cluster)
        for account, share in ours.items():
            (row,) = [r for r in table if r.account.strip() == account and not r.user]
            assert row.fair_share is not None
            assert (share.shares_norm, share.usage_effective, share.factor) == (
                row.norm_shares,
                row.effectv_usage,
                row.fair_share,
            )
        assert ours[HEAVY].factor < ours[LIGHT].factor  # type: ignore[operator]
    finally:
        conf.write_text(fair_tree)
        accounting_cluster.restart_controller()
