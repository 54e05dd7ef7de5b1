"""Shared test helpers: finding the real tools the suite depends on."""

from __future__ import annotations

import os
import shutil
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
    "tests/report/test_report_cli.py": "synthetic_report",
    "tests/report/test_report_html.py": "synthetic_report",
    "tests/report/test_report_numbers.py": "synthetic_report",
}


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Whole test files to each worker, as `--dist loadfile` does (a module-scoped daemon
    starts once), except that the files of SHARED_SESSION_FIXTURES go together."""
    from xdist.scheduler import LoadScopeScheduling

    class FilesAndSharedFixtures(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return SHARED_SESSION_FIXTURES.get(path, path)

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
