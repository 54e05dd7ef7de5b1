"""Each account's fair share as Slurm's `sshare` reports it (accounting clusters only).

One `sshare --all --parsable2` is one REQUEST_SHARE_INFO RPC to slurmctld, answered from
its memory (slurmdbd is not asked), whatever the number of accounts and users. We keep
the account rows (the cluster's root association left out) with three numbers, each as
sshare prints it:

- shares_norm (NormShares): the account's shares over those of its siblings (Fair Tree,
  Slurm's default) or over all shares (classic multifactor);
- usage_effective (EffectvUsage): its decayed usage over its parent's (Fair Tree) or over
  the cluster's, with the classic formula's share of its parent;
- factor (FairShare): the fair-share priority factor, 0 to 1, lower = further over its
  share. Classic multifactor prints one per account. Fair Tree prints none on account
  rows, only per user; there an account's factor is the highest of its users' (anywhere
  below it): the factor the best-placed job charged to it gets. Fair Tree ranks all users
  of an account above those of a sibling with a lower level fair share, so this orders
  sibling accounts as Slurm does. An account with no user below it has no factor there.

A cluster without accounting (`AccountingStorageType=accounting_storage/none`) answers
with its header and not one row (every accounting cluster has at least its root
association): that is None, not an error.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass

from nvwatch.agent.sources.scheduler.slurm_commands import SchedulerError, run_slurm

FIELDS = ("Account", "User", "NormShares", "EffectvUsage", "FairShare")
ARGV = ("sshare", "--all", "--parsable2", f"--format={','.join(FIELDS)}")
_SHOWN_CHARS = 80


@dataclass(frozen=True)
class FairShare:
    account: str
    shares_norm: float
    usage_effective: float
    factor: float | None  # None: Fair Tree and no user below the account


@dataclass(frozen=True)
class _Row:
    number: int  # line number in sshare's output, for messages
    depth: int  # sshare indents a child one space more than its parent
    account: str
    user: str
    shares_norm: float
    usage_effective: float
    factor: float | None


def read_fairshare(
    timeout_s: float,
    env: Mapping[str, str] | None = None,
    run: Callable[[Sequence[str], float, Mapping[str, str] | None], str] = run_slurm,
) -> tuple[FairShare, ...] | None:
    """Every account's fair share, in sshare's (tree) order; None where the cluster runs no
    accounting. SchedulerError (one line) when sshare fails or prints what we cannot read.
    `run` runs sshare (the scheduler source's SlurmClient)."""
    return parse_sshare(run(ARGV, timeout_s, env))


def parse_sshare(text: str) -> tuple[FairShare, ...] | None:
    lines = text.splitlines()
    if not lines:
        raise SchedulerError("sshare printed nothing, not even its header")
    if lines[0].strip() != "|".join(FIELDS):
        raise SchedulerError(f"sshare printed an unexpected header: {_shown(lines[0])}")
    rows = [_row(number, line) for number, line in enumerate(lines[1:], start=2) if line]
    if not rows:
        return None
    best_user_factor = _best_user_factor_below(rows)
    shares: dict[str, FairShare] = {}
    for row in rows:
        if row.user or row.depth == 0:  # a user's row, or the cluster's root association
            continue
        if row.account in shares:
            raise SchedulerError(f"sshare line {row.number}: account {row.account!r} twice")
        factor = row.factor if row.factor is not None else best_user_factor.get(row.account)
        shares[row.account] = FairShare(row.account, row.shares_norm, row.usage_effective, factor)
    return tuple(shares.values())


def _row(number: int, line: str) -> _Row:
    fields = line.split("|")
    if len(fields) != len(FIELDS):
        raise SchedulerError(
            f"sshare line {number}: {len(fields)} fields, not {len(FIELDS)}: {_shown(line)}"
        )
    account, user, shares_norm, usage_effective, factor = fields
    name = account.lstrip(" ")
    if not name:
        raise SchedulerError(f"sshare line {number}: no account: {_shown(line)}")
    return _Row(
        number=number,
        depth=len(account) - len(name),
        account=name,
        user=user.strip(),
        shares_norm=_number(shares_norm, number, "NormShares"),
        usage_effective=_number(usage_effective, number, "EffectvUsage"),
        factor=_number(factor, number, "FairShare") if factor.strip() else None,
    )


def _number(text: str, number: int, column: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise SchedulerError(f"sshare line {number}: {column} is not a number: {_shown(text)}")
    return value


def _best_user_factor_below(rows: list[_Row]) -> dict[str, float]:
    """account -> the highest FairShare of a user row anywhere below it."""
    best: dict[str, float] = {}
    for row, ancestors in _with_ancestors(rows):
        if not row.user or row.factor is None:
            continue
        for account in ancestors:
            best[account] = max(best.get(account, row.factor), row.factor)
    return best


def _with_ancestors(rows: list[_Row]) -> Iterator[tuple[_Row, list[str]]]:
    """Each row with the accounts above it, read from sshare's indentation."""
    open_accounts: list[_Row] = []
    for row in rows:
        while open_accounts and open_accounts[-1].depth >= row.depth:
            open_accounts.pop()
        yield row, [account.account for account in open_accounts]
        if not row.user:
            open_accounts.append(row)


def _shown(text: str) -> str:
    """A piece of sshare's output for a one-line message: quoted, escaped, cut short."""
    return repr(text[:_SHOWN_CHARS])
