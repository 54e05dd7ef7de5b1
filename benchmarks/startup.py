"""What `nvwatch serve` costs before its first scrape: start-up time, RSS, modules loaded.

    python -m benchmarks.startup [--runs 5] [--baseline REF] [--update docs/performance.md]

Starts `serve` as a new process, `--runs` times in each mode (real: this machine's
driver, which on a machine without a GPU means NVML down, exactly what a real node's
agent loads; simulated: `--simulate dgx-h100`), and measures from exec to the first answer
of /healthz, the process's RSS then, and how many nvwatch modules it holds (the process
lists its own sys.modules at that moment). With `--baseline REF` the same is measured on
that git revision, checked out in a temporary worktree, so the table shows before and
after on one machine in one run. `--update FILE` rewrites this section of FILE in place
(benchmarks/run.py writes it with the rest).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import replace_section
from nvwatch.sim.ports import free_port

REPO = Path(__file__).resolve().parent.parent
MODES = {
    "real": ["--sources=nvml,infiniband,host"],
    "simulated": ["--simulate=dgx-h100"],
}
BEGIN, END = "<!-- startup:begin -->", "<!-- startup:end -->"

# run inside the agent's process: lists its modules once it serves, so the count is
# what the serving process holds, not what a separate import would load
_LIST_MODULES = """
import json, os, sys, threading, time, urllib.error, urllib.request
out, port = sys.argv.pop(1), sys.argv.pop(1)
def listed():
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
        except urllib.error.HTTPError:
            pass
        except Exception:
            time.sleep(0.02)
            continue
        break
    names = [m for m in sys.modules if m == "nvwatch" or m.startswith("nvwatch.")]
    with open(out + ".tmp", "w") as file:
        json.dump(names, file)
    os.replace(out + ".tmp", out)  # whole or not at all
threading.Thread(target=listed, daemon=True).start()
from nvwatch.agent.cli import main
main(sys.argv[1:])
"""


@dataclass(frozen=True)
class Startup:
    code: str  # "this checkout" or the baseline's revision
    mode: str
    seconds: float  # median, exec to the first /healthz answer
    rss_mib: float  # median RSS at that moment
    modules: int  # nvwatch modules in the serving process
    runs: int = 1  # starts the medians are taken over


def _answers(port: int) -> bool:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=0.5)
    except urllib.error.HTTPError:
        return True  # 503 before the first poll still means it serves
    except OSError:
        return False
    return True


def _one_start(env: dict[str, str], cwd: Path, flags: list[str]) -> tuple[float, float, int]:
    port = free_port()
    with tempfile.TemporaryDirectory() as scratch:
        listed = Path(scratch) / "modules.json"
        argv = [sys.executable, "-c", _LIST_MODULES, str(listed), str(port), "serve",
                f"--listen=127.0.0.1:{port}", *flags]  # fmt: skip
        started = time.perf_counter()
        process = subprocess.Popen(
            argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            deadline = time.monotonic() + 60
            while not _answers(port):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"serve {' '.join(flags)} did not start in {cwd}")
                time.sleep(0.01)
            seconds = time.perf_counter() - started
            rss = psutil.Process(process.pid).memory_info().rss / 2**20
            while not listed.exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            modules = len(json.loads(listed.read_text()))
        finally:
            process.terminate()
            process.wait(20)
    return seconds, rss, modules


def measure(code: str, env: dict[str, str], cwd: Path, runs: int) -> list[Startup]:
    found = []
    for mode, flags in MODES.items():
        times, rss, modules = [], [], 0
        for _ in range(runs):
            seconds, mib, modules = _one_start(env, cwd, flags)
            times.append(seconds)
            rss.append(mib)
        median_s, median_mib = statistics.median(times), statistics.median(rss)
        found.append(Startup(code, mode, median_s, median_mib, modules, runs))
    return found


# a top-level package of pyproject's [tool.setuptools.package-dir]: "nvwatch.agent" = "agent"
_PACKAGE_DIR = re.compile(r'^"nvwatch\.(\w+)" = "([\w./-]+)"$', re.MULTILINE)


@contextlib.contextmanager
def baseline_checkout(ref: str) -> Iterator[tuple[Path, Path]]:
    """`ref` in a temporary worktree, and a directory to put first on PYTHONPATH that
    holds `nvwatch/` with a link to each of that revision's top-level packages, as its
    pyproject maps them. The packages live under `nvwatch.` only through an install, and
    the installed `nvwatch` (this checkout's) is a namespace package: without the links
    first on the path, the baseline would import this checkout's code."""
    with tempfile.TemporaryDirectory(prefix="nvwatch-baseline-") as root:
        path = Path(root) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", "-q", str(path), ref],
                       cwd=REPO, check=True)  # fmt: skip
        try:
            links = Path(root) / "links" / "nvwatch"
            links.mkdir(parents=True)
            pyproject = (path / "pyproject.toml").read_text(encoding="utf-8")
            for name, directory in _PACKAGE_DIR.findall(pyproject):
                (links / name).symlink_to(path / directory, target_is_directory=True)
            yield path, links.parent
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=REPO,
                           check=False)  # fmt: skip


def run(runs: int, baseline: str | None) -> list[Startup]:
    results = measure("this checkout", dict(os.environ), REPO, runs)
    if baseline:
        with baseline_checkout(baseline) as (tree, importable):
            env = {**os.environ, "PYTHONPATH": str(importable)}
            results += measure(baseline[:12], env, tree, runs)
    return results


def startup_section(results: list[Startup]) -> str:
    if not results:
        return ""
    rows = "\n".join(
        f"| {r.code} | {r.mode} | {r.seconds * 1000:.0f} ms | {r.rss_mib:.1f} MiB | {r.modules} |"
        for r in results
    )
    return f"""{BEGIN}
## Start-up of `serve`

`python -m benchmarks.startup`, the median of {results[0].runs} starts per row: from exec
to the first answer of /healthz, the process's RSS then, and the nvwatch modules it holds.
"real" is this machine's driver (no GPU here: NVML down, which is what a real node's agent
loads); "simulated" is `--simulate dgx-h100`. A baseline row is the same measurement on
that revision in a temporary worktree, in the same run (load average then: {_load()}).

| code | mode | start-up | RSS | nvwatch modules |
|---|---|---|---|---|
{rows}
{END}
"""


def _load() -> str:
    return " ".join(f"{value:.1f}" for value in os.getloadavg())


def update(path: Path, section: str) -> None:
    """Replace this section of `path` (or append it before the end)."""
    replace_section(path, section, BEGIN, END)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", help="a git revision to measure beside this checkout")
    parser.add_argument("--update", type=Path, help="rewrite this section of a markdown file")
    args = parser.parse_args()
    results = run(args.runs, args.baseline)
    print(json.dumps([asdict(r) for r in results], indent=2))
    if args.update:
        update(args.update, startup_section(results))


if __name__ == "__main__":
    main()
