"""Shared test helpers: finding the real tools the suite depends on."""

from __future__ import annotations

import os
import shutil
import signal
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from tests.history.backfill import HistoryPrometheus


# Test files that share a costly session fixture, by the name of what they share: under
# pytest-xdist (scripts/test) each group goes to one worker, which starts it once.
SHARED_SESSION_FIXTURES = {
    "tests/history/test_backfilled_history.py": "history_prometheus",
    "tests/report/test_report_history.py": "history_prometheus",
    "tests/report/test_report_bmc.py": "synthetic_report",
    "tests/report/test_report_cli.py": "synthetic_report",
    "tests/report/test_report_html.py": "synthetic_report",
    "tests/report/test_report_numbers.py": "synthetic_report",
    "tests/report/test_number_formats.py": "synthetic_report",
}

# Files that each run a whole simulated fleet, scraped every second or few by real
# Prometheus (and in the first lane VictoriaMetrics and vmagents): the first lane's fleets
# of 17 to 40 agents take most of two cores, and two of them at once starved both past
# their alert deadlines. Each lane goes to one worker, its files one after the other, so
# at most one large and one small fleet run at a time whatever the number of workers.
FLEET_LANES = {
    "tests/e2e/test_sharded_vm.py": "large_fleets",
    "tests/e2e/test_restart_matrix.py": "large_fleets",
    "tests/e2e/test_fleet_e2e.py": "large_fleets",
    "tests/e2e/test_stragglers_e2e.py": "large_fleets",
    "tests/preview/test_dashboard_preview.py": "small_fleets",
    "tests/deploy/test_local_stack.py": "small_fleets",
    "tests/e2e/test_bmc_e2e.py": "small_fleets",
}


# The files that take longest, mostly waiting on time (alert `for:` windows, a block
# reload, a health check's interval), longest first (per-file totals of a full run);
# a lane starts where its first file stands. Workers take them first, so the suite does
# not end with one of them running alone.
LONGEST_FIRST = (
    "tests/benchmarks/test_thousand.py",
    "tests/e2e/test_sharded_vm.py",
    "tests/e2e/test_restart_matrix.py",
    "tests/e2e/test_fleet_e2e.py",
    "tests/e2e/test_stragglers_e2e.py",
    "tests/preview/test_dashboard_preview.py",
    "tests/deploy/test_local_stack.py",
    "tests/e2e/test_bmc_e2e.py",
    "tests/history/test_readme_backfill.py",
    "tests/slurm/test_healthcheck.py",
    "tests/slurm/test_job_store.py",
    "tests/slurm/test_queue_alerts.py",
    "tests/history/test_backfilled_history.py",
    "tests/report/test_report_history.py",
    "tests/real_gpu/test_check.py",
    "tests/benchmarks/test_benchmarks.py",
    "tests/release/test_release.py",
    "tests/agent/test_server_soak.py",
    "tests/sim/test_scenario_syntax.py",
    "tests/mixin/test_promtool.py",
    "tests/stragglers/test_evaluate.py",
    "tests/benchmarks/test_peer_cost.py",
)


def pytest_configure(config: pytest.Config) -> None:
    """A SIGTERM (`timeout`, a CI runner stopping the job) ends the session as Ctrl-C
    does: pytest then tears the fixtures down, which stop the servers they started (in
    sessions of their own, so no signal reaches them); the default handler ends the
    process at once and leaves them running with nobody to stop them."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, signal.default_int_handler)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """LONGEST_FIRST's files first, the rest in their usual order."""
    rank = {path: index for index, path in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Whole test files to each worker, as `--dist loadfile` does (a module-scoped daemon
    starts once), except that the files of SHARED_SESSION_FIXTURES go together; handed
    out in collection order (LONGEST_FIRST), not xdist's most-tests-first; the files of
    FLEET_LANES go together as well."""
    from xdist.scheduler import LoadScopeScheduling

    config.option.loadscopereorder = False

    class FilesAndSharedFixtures(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return SHARED_SESSION_FIXTURES.get(path) or FLEET_LANES.get(path, path)

    return FilesAndSharedFixtures(config, log)


def require_tool(*names: str) -> str:
    """Path of the first tool found; in CI a missing tool fails the test, locally skips."""
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    message = f"required tool not installed: {' or '.join(names)}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


@pytest.fixture(scope="session")
def history_prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HistoryPrometheus]:
    """30 days of a simulated 6-node fleet, backfilled into a real Prometheus on loopback
    (tests/history/backfill.py); `.truth` is the generator's ground truth. One per session,
    stopped at its end."""
    from tests.history.backfill import backfilled_prometheus

    with backfilled_prometheus(tmp_path_factory.mktemp("history")) as history:
        yield history
