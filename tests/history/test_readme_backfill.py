"""The README's backfill flow, run as written: a month of simulated history and the
recording rules over it in a real Prometheus, and then no capacity panel is empty.

The commands are the README's own sh blocks (under `nvwatch simulate history`), each
line run by bash in a scratch directory with only the port changed: 127.0.0.1:9090
becomes a free loopback port. The line ending in `&` (Prometheus) runs in the
background and is stopped at the end. Before the rules are moved in, the capacity review
dashboard's panels are empty (they read recorded series only); after, none is.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from nvwatch.alerts.promql import metric_names
from nvwatch.alerts.recording import recorded_names
from nvwatch.dashboards.preview import panels_of
from nvwatch.mixin.config import MixinConfig
from nvwatch.sim.ports import free_port
from tests.conftest import require_tool
from tests.e2e.loopback import wait_for
from tests.processes import stop

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text(encoding="utf-8")
README_PORT = "127.0.0.1:9090"
CAPACITY = "nvwatch-capacity-review.json"
RELOAD_LIMIT_S = 150.0  # Prometheus looks for new blocks every minute


def _flow() -> tuple[list[str], list[str]]:
    """(the backfill block's lines, the lines of the block after it)."""
    section = README[README.index("`nvwatch simulate history` writes what") :]
    blocks = re.findall(r"```sh\n(.*?)```", section, flags=re.DOTALL)
    backfill, after = blocks[0], blocks[1]
    assert "create-blocks-from --max-block-duration=800h rules" in backfill
    return backfill.strip().splitlines(), after.strip().splitlines()


def _local(line: str, port: int) -> str:
    return line.replace(README_PORT, f"127.0.0.1:{port}")


def _env() -> dict[str, str]:
    """`nvwatch` is the venv's, as after the README's set-up."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NVWATCH_")}
    return {**clean, "PATH": path}


def _run(line: str, work: Path) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["bash", "-c", line], cwd=work, env=_env(), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    return done


@contextlib.contextmanager
def _background(line: str, work: Path) -> Iterator[subprocess.Popen[bytes]]:
    log = (work / "background.log").open("wb")
    process = subprocess.Popen(
        ["bash", "-c", f"exec {line.removesuffix('&').strip()}"],
        cwd=work,
        env=_env(),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield process
    finally:
        stop(process, 30)
        log.close()


def _ready(url: str, process: subprocess.Popen[bytes], work: Path) -> bool:
    if process.poll() is not None:
        raise AssertionError((work / "background.log").read_text(errors="replace")[-2000:])
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _has(url: str, expr: str, at: str) -> bool:
    query = urllib.parse.urlencode({"query": expr, "time": at})
    with urllib.request.urlopen(f"{url}/api/v1/query?{query}", timeout=30) as response:
        return bool(json.load(response)["data"]["result"])


def _empty_capacity_panels(preview: str, work: Path) -> set[str]:
    """The capacity review's panels `nvwatch dashboards preview` finds no data in."""
    done = _run(preview, work)
    return set(re.findall(rf"^{re.escape(CAPACITY)}: no data in panel '(.*)'$", done.stderr, re.M))


def _reading_only_recorded_series() -> set[str]:
    """Titles of the capacity panels whose every query reads recorded series only."""
    dashboard = json.loads((REPO / "dashboards" / "generated" / CAPACITY).read_text())
    recorded = recorded_names(MixinConfig())
    titles = set()
    for panel in panels_of(dashboard):
        names = {n for t in panel.get("targets", []) for n in metric_names(t.get("expr", ""))}
        if names and names <= recorded:
            titles.add(panel["title"])
    assert titles, "the capacity review reads no recorded series any more"
    return titles


def test_the_readme_backfill_flow_fills_every_capacity_panel(tmp_path: Path) -> None:
    require_tool("promtool")
    require_tool("prometheus")
    backfill, after = _flow()
    preview = next(line for line in after if line.startswith("nvwatch dashboards preview"))
    port = free_port("127.0.0.1")
    url = f"http://127.0.0.1:{port}"
    (mv,) = [line for line in backfill if line.startswith("mv ")]
    before_mv = backfill[: backfill.index(mv)]
    start = next(line for line in backfill if line.endswith("&"))
    end_time = re.search(r"--end=(\S+)", next(x for x in backfill if " rules " in x))
    assert end_time is not None
    at = end_time.group(1)

    for line in before_mv[: before_mv.index(start)]:
        _run(_local(line, port), tmp_path)
    with _background(_local(start, port), tmp_path) as prometheus:
        wait_for(
            "prometheus on the README's history", lambda: _ready(url, prometheus, tmp_path), 60
        )
        for line in before_mv[before_mv.index(start) + 1 :]:
            _run(_local(line, port), tmp_path)
        # the raw history alone: every capacity panel reads a recorded series
        empty_before = _empty_capacity_panels(_local(preview, port), tmp_path)
        assert empty_before >= _reading_only_recorded_series(), empty_before

        _run(_local(mv, port), tmp_path)
        recorded = "cluster:nvwatch_gpu_utilization_ratio:avg"
        deadline = time.monotonic() + RELOAD_LIMIT_S
        while not _has(url, recorded, at):
            assert time.monotonic() < deadline, f"{recorded} not loaded in {RELOAD_LIMIT_S}s"
            time.sleep(3)
        assert _empty_capacity_panels(_local(preview, port), tmp_path) == set()
