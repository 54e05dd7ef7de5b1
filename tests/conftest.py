"""Shared test helpers: finding the real tools the suite depends on."""

from __future__ import annotations

import os
import shutil

import pytest


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
