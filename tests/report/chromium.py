"""Render a page in headless Chromium (Debian's `chromium`) to PNG and PDF, and watch it.

What the page asked the network for comes from Chromium's own net log (no DevTools
needed): requests whose initiator is the page (an opaque file:// origin, "null") rather
than the browser itself ("not an origin": update checks and the like, which the flags
below mostly silence). Console messages come from --enable-logging.
"""

from __future__ import annotations

import html
import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


MEASURE = Path(__file__).with_name("measure.js")


def measure(binary: str, page: Path, work: Path, *, width: int) -> dict[str, Any]:
    """What measure.js finds in `page` laid out in a window `width` pixels wide: the page
    is copied with the script appended, and Chromium prints the DOM the script wrote."""
    work.mkdir(parents=True, exist_ok=True)
    copy = work / f"measured-{width}.html"
    script = f"<script>{MEASURE.read_text()}</script>"
    copy.write_text(page.read_text(encoding="utf-8").replace("</body>", script + "</body>"))
    result = subprocess.run(
        [
            binary,
            *FLAGS,
            f"--user-data-dir={work / 'profile'}",
            f"--window-size={width},1600",
            "--dump-dom",
            copy.resolve().as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    found = re.search(r'<pre id="nvwatch-measure">(.*?)</pre>', result.stdout, re.DOTALL)
    assert found, result.stdout[-2000:]
    measured: dict[str, Any] = json.loads(html.unescape(found.group(1)))
    return measured
