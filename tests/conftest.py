"""Shared test helpers: finding the real tools the suite depends on."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from tests.history.backfill import HistoryPrometheus


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
