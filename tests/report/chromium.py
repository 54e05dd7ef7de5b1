"""Render a page in headless Chromium (Debian's `chromium`) to PNG and PDF, and watch it.

What the page asked the network for comes from Chromium's own net log (no DevTools
needed): requests whose initiator is the page (an opaque file:// origin, "null") rather
than the browser itself ("not an origin": update checks and the like, which the flags
below mostly silence). Console messages come from --enable-logging.
"""

from __future__ import annotations

import json
import subprocess
from dataclasses import dataclass
from pathlib import Path

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
LOCAL_SCHEMES = ("file:", "data:")


@dataclass(frozen=True)
class Rendering:
    output: Path
    page_requests: list[str]  # URLs the page itself asked for, other than file: and data:
    console: list[str]  # console messages the page logged


def render(binary: str, page: Path, output: Path, work: Path, *, pdf: bool) -> Rendering:
    work.mkdir(parents=True, exist_ok=True)
    netlog = work / f"{output.stem}-netlog.json"
    target = f"--print-to-pdf={output}" if pdf else f"--screenshot={output}"
    result = subprocess.run(
        [
            binary,
            *FLAGS,
            f"--user-data-dir={work / 'profile'}",
            "--enable-logging=stderr",
            "--v=0",
            f"--log-net-log={netlog}",
            "--window-size=1200,1600",
            target,
            page.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line]
    return Rendering(output, _page_requests(netlog), console)


def _page_requests(netlog: Path) -> list[str]:
    log = json.loads(netlog.read_text())
    start_job = log["constants"]["logEventTypes"]["URL_REQUEST_START_JOB"]
    urls = []
    for event in log["events"]:
        params = event.get("params", {})
        if event["type"] != start_job or "url" not in params:
            continue
        if params.get("initiator") == "not an origin":  # the browser's own housekeeping
            continue
        if not params["url"].startswith(LOCAL_SCHEMES):
            urls.append(params["url"])
    return urls
