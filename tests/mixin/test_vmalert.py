"""vmalert (Debian's victoria-metrics package) loads the rules deploy/scale gives it."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from nvwatch.alerts import build as alerts_build
from tests.conftest import require_tool
from tests.mixin.conftest import REPO

GENERATED = REPO / "alerts" / "generated"


def test_vmalert_loads_the_recording_rules_and_its_alert_file(tmp_path: Path) -> None:
    vmalert = require_tool("vmalert")
    files = [GENERATED / alerts_build.PROMETHEUS_RECORDING, GENERATED / alerts_build.VMALERT_ALERTS]
    result = subprocess.run(
        [vmalert, "-dryRun", *(f"-rule={f}" for f in files)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]


def test_the_vmalert_file_differs_only_by_keep_firing_for() -> None:
    plain = yaml.safe_load((GENERATED / alerts_build.PROMETHEUS_ALERTS).read_text())
    for_vmalert = yaml.safe_load((GENERATED / alerts_build.VMALERT_ALERTS).read_text())
    for group in plain["groups"]:
        for rule in group["rules"]:
            rule.pop("keep_firing_for", None)
    assert plain == for_vmalert
