"""Slurm accounting for the test cluster: a real MariaDB and slurmdbd on 127.0.0.1.

The recipe (measured on Debian 12: mariadb-server 10.11, slurmdbd 22.05; docs/scheduler.md,
"Accounting"):

- MariaDB: `mariadb-install-db --no-defaults` into a fresh datadir on a tmpfs (about 1 s
  there, 3-5 s on disk), then `mariadbd --no-defaults --user=root` on its own socket and a
  free TCP port with `--bind-address=127.0.0.1`. `--auth-root-authentication-method=normal`
  leaves root@127.0.0.1 without a password, so slurmdbd needs no credential; flushing is
  off (a throw-away database) and no system service is involved.
- slurmdbd: slurmdbd.conf beside slurm.conf (slurmdbd finds it through SLURM_CONF; it
  has no option naming it), mode 600, owned by its SlurmUser (root here), with
  `DbdHost=<short hostname>` and `DbdAddr=127.0.0.1`. It creates its schema on first start.
- The controller: `AccountingStorageType=accounting_storage/slurmdbd` with the dbd's port,
  and `AccountingStoragePass=<munge socket>`: without it the client commands (sacctmgr,
  and slurmctld to slurmdbd) look for munged at its default socket and fail.
- Fair share: `PriorityType=priority/multifactor`. Usage is charged to associations only
  by the controller's decay thread, when slurmctld starts and then every
  PriorityCalcPeriod (whole minutes, at least one); a job's end charges nothing. So a test
  that needs usage runs jobs and restarts slurmctld while they run
  (`Cluster.restart_controller`); the long calc period keeps every number still between
  restarts.
- Accounts: one `sacctmgr load` of a tree file (`add_accounts`), about 1 s; a sacctmgr
  call per account and per user costs 0.5-1 s each.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from nvwatch.sim.ports import free_port
from tests.processes import stop

START_LIMIT_S = 60.0
STOP_LIMIT_S = 15.0
TMPFS = Path("/dev/shm")
# usage and factors move only when the controller restarts, never between two reads
CALC_PERIOD_MIN = 60


@dataclass(frozen=True)
class Slurmdbd:
    """Where the controller finds slurmdbd, and how it authenticates to it."""

    dbd_port: int
    munge_socket: Path

    def slurm_conf(self) -> str:
        """slurm.conf lines for accounting through slurmdbd and multifactor priority."""
        return (
            "AccountingStorageType=accounting_storage/slurmdbd\n"
            "AccountingStorageHost=127.0.0.1\n"
            f"AccountingStoragePort={self.dbd_port}\n"
            f"AccountingStoragePass={self.munge_socket}\n"
            "AccountingStorageTRES=gres/gpu\n"
            "AccountingStorageEnforce=associations\n"
            "PriorityType=priority/multifactor\n"
            "PriorityWeightFairshare=10000\n"
            f"PriorityCalcPeriod={CALC_PERIOD_MIN}\n"
        )


@contextmanager
def accounting_store(
    root: Path, env: dict[str, str], host: str, cluster_name: str, dbd: Slurmdbd
) -> Iterator[None]:
    """MariaDB and slurmdbd running for the cluster in `root` (whose munged must already
    answer), the cluster registered; both stopped by pid, the database removed."""
    with ExitStack() as stack:
        data = Path(tempfile.mkdtemp(prefix="nvwatch-mariadb-", dir=_scratch(root)))
        stack.callback(shutil.rmtree, data, ignore_errors=True)
        db_port = free_port()
        stack.enter_context(_mariadb(data, db_port))
        _write_dbd_conf(root, host, db_port, dbd)
        stack.enter_context(_daemon(["slurmdbd", "-D"], root, env))
        _wait_for(f"slurmdbd on port {dbd.dbd_port}", _accepts(dbd.dbd_port), root)
        _sacctmgr(env, "add", "cluster", cluster_name)
        yield


def _scratch(root: Path) -> Path:
    """A tmpfs where there is one: the database is thrown away, its fsyncs cost seconds."""
    return TMPFS if TMPFS.is_dir() and os.access(TMPFS, os.W_OK) else root


@contextmanager
def _mariadb(data: Path, port: int) -> Iterator[None]:
    common = [
        "--no-defaults",
        f"--datadir={data}/db",
        "--user=root",
        "--skip-name-resolve",
        "--innodb-flush-method=nosync",
        "--innodb-flush-log-at-trx-commit=0",
        "--innodb-doublewrite=0",
        "--innodb-buffer-pool-size=64M",
        "--innodb-log-file-size=8M",
    ]
    subprocess.run(
        [
            "mariadb-install-db",
            *common,
            "--auth-root-authentication-method=normal",
            "--skip-test-db",
        ],
        check=True,
        capture_output=True,
        timeout=START_LIMIT_S,
    )
    server = [
        "mariadbd",
        *common,
        f"--socket={data}/mysqld.sock",
        f"--port={port}",
        "--bind-address=127.0.0.1",
        f"--pid-file={data}/mysqld.pid",
        f"--log-error={data}/mysqld.err",
        "--innodb-lock-wait-timeout=900",  # slurmdbd warns below this
    ]
    with _daemon(server, data, dict(os.environ)):
        _wait_for(f"mariadbd on port {port}", _accepts(port), data)
        yield


def _write_dbd_conf(root: Path, host: str, db_port: int, dbd: Slurmdbd) -> None:
    conf = root / "slurmdbd.conf"
    conf.write_text(
        f"""AuthType=auth/munge
AuthInfo=socket={dbd.munge_socket}
DbdHost={host}
DbdAddr=127.0.0.1
DbdPort={dbd.dbd_port}
SlurmUser=root
PidFile={root}/slurmdbd.pid
LogFile={root}/log/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort={db_port}
StorageUser=root
StorageLoc=slurm_acct_db
"""
    )
    conf.chmod(0o600)  # slurmdbd refuses a readable one: it may hold the database password


@contextmanager
def _daemon(args: list[str], cwd: Path, env: dict[str, str]) -> Iterator[None]:
    process = start_daemon(args, cwd, env)
    try:
        yield
    finally:
        stop(process, STOP_LIMIT_S)


def start_daemon(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """A daemon in its own session (it keeps its working directory and no terminal),
    its output dropped."""
    return subprocess.Popen(
        args,
        cwd=cwd,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _accepts(port: int) -> Callable[[], bool]:
    def check() -> bool:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return True
        except OSError:
            return False

    return check


def _wait_for(what: str, check: Callable[[], bool], logs: Path) -> None:
    deadline = time.monotonic() + START_LIMIT_S
    while not check():
        if time.monotonic() > deadline:
            text = "\n".join(
                f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}"
                for p in sorted([*logs.glob("*.err"), *logs.glob("log/*.log")])
            )
            raise TimeoutError(f"{what} within {START_LIMIT_S:g}s\n{text}")
        time.sleep(0.1)


def _sacctmgr(env: dict[str, str], *args: str) -> str:
    done = subprocess.run(
        ["sacctmgr", "-i", *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"sacctmgr {' '.join(args)}: {done.stderr.strip() or done.stdout}")
    return done.stdout


@dataclass(frozen=True)
class Account:
    """An association tree entry for `add_accounts`: a parent comes before its children."""

    name: str
    shares: int
    users: tuple[str, ...] = ()
    parent: str = "root"


def add_accounts(
    cluster_root: Path, env: dict[str, str], cluster_name: str, accounts: list[Account]
) -> None:
    """The accounts and their users, in one `sacctmgr load` (about 1 s; one sacctmgr call
    per account and per user costs 0.5-1 s each here)."""
    lines = [f"Cluster - '{cluster_name}'"]
    for parent in ["root", *(account.name for account in accounts)]:
        children = [
            f"Account - '{a.name}':Fairshare={a.shares}" for a in accounts if a.parent == parent
        ]
        users = next((a.users for a in accounts if a.name == parent), ())
        if children or users:
            lines += [
                f"Parent - '{parent}'",
                *children,
                *(f"User - '{u}':Fairshare=1" for u in users),
            ]
    tree = cluster_root / "accounts.cfg"
    tree.write_text("\n".join(lines) + "\n")
    _sacctmgr(env, "load", f"file={tree}")
