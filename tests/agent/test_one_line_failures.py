"""Every command, given what an operator gets wrong, answers with one line and exit code 2.

A table of (command, bad input): the report extra missing (numpy or matplotlib not
importable), a port in use, an output under a file or where nothing may be written, a
config that is missing, a directory or not text. Each runs the real CLI in a fresh
interpreter (its stderr as a terminal shows it) and must print exactly one line,
`nvwatch: error: ...` naming the problem, no traceback, nothing on stdout, and exit with
the code the README documents for bad input.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from nvwatch.agent.cli import EXIT_BAD_INPUT

REPO = Path(__file__).resolve().parents[2]
CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("NVWATCH_")}
NOWHERE = "http://127.0.0.1:9"  # nothing listens on the discard port: never reached
# where root cannot write either: sysfs refuses new files (EACCES)
UNWRITABLE = "/sys/nvwatch-out"


@dataclass(frozen=True)
class Paths:
    """Inputs and outputs of the table, made fresh per test in tmp_path."""

    tmp: Path
    busy_port: int

    @property
    def file(self) -> str:  # a plain file, where a directory is wanted
        return str(self.tmp / "a-file")

    @property
    def under_file(self) -> str:  # a path whose parent is a file
        return str(self.tmp / "a-file" / "out")

    @property
    def missing(self) -> str:
        return str(self.tmp / "missing.yaml")

    @property
    def directory(self) -> str:
        return str(self.tmp / "a-directory")

    @property
    def binary(self) -> str:  # not UTF-8
        return str(self.tmp / "binary.yaml")

    @property
    def inventory(self) -> str:
        return str(self.tmp / "cluster.csv")

    def out(self, name: str) -> str:
        return str(self.tmp / "outputs" / name)


@dataclass(frozen=True)
class Case:
    name: str
    args: tuple[str, ...]  # may hold {placeholders} of Paths
    expected: str  # part of the one line
    hide: str | None = None  # a module made unimportable first

    def argv(self, paths: Paths) -> list[str]:
        return [
            a.format(
                file=paths.file,
                under_file=paths.under_file,
                missing=paths.missing,
                directory=paths.directory,
                binary=paths.binary,
                inventory=paths.inventory,
                busy=paths.busy_port,
                out=paths.out("out"),
                unwritable=UNWRITABLE,
            )
            for a in self.args
        ]


HISTORY = ("simulate", "history", "--nodes", "6", "--days", "1")
FLEET = ("simulate", "fleet", "--profile", "dgx1-v100")
ALERTS = ("alerts", "build", "--out", "{out}")
DASHBOARDS = ("dashboards", "build", "--out", "{out}")
REPORT = ("report", "--prometheus", NOWHERE, "--out", "{out}")
PREVIEW = ("dashboards", "preview", "--prometheus", NOWHERE, "--out", "{out}")
SERVE = ("serve", "--sources", "host", "--listen", "127.0.0.1:0")
GET = ("web-config", "get", NOWHERE)


def _out_cases() -> list[Case]:
    """Every command that writes into --out, with a parent that is a file and a parent
    nothing may be written in."""
    writers = {
        "simulate history": HISTORY,
        "alerts build": ("alerts", "build", "--no-docs", "--no-kubernetes"),
        "dashboards build": ("dashboards", "build", "--no-kubernetes"),
        "report": REPORT[:-2],
        "dashboards preview": PREVIEW[:-2],
        "inventory": ("inventory", "--in", "{inventory}"),
    }
    cases = []
    for name, args in writers.items():
        cases += [
            Case(
                f"{name} --out under a file", (*args, "--out", "{under_file}/x"), "not a directory"
            ),
            Case(
                f"{name} --out unwritable",
                (*args, "--out", "{unwritable}/x"),
                "cannot write to --out",
            ),
        ]
    return cases


def _config_cases() -> list[Case]:
    """Every file a command reads as its configuration: missing, a directory, not text."""
    readers = [
        (SERVE, "--config"),
        (SERVE, "--web-config"),
        (SERVE, "--bmc-config"),
        (("dump", "--sources", "host"), "--config"),
        (("doctor", "--sources", "host"), "--config"),
        (("topology",), "--config"),
        (ALERTS, "--config"),
        (DASHBOARDS, "--config"),
        (("alerts", "evaluate-stragglers", "{directory}"), "--config"),
        (REPORT, "--config"),
        (("inventory", "--out", "{out}"), "--in"),
        ((*REPORT, "--basic-auth-user", "u"), "--basic-auth-password-file"),
        ((*GET, "--basic-auth-user", "u"), "--basic-auth-password-file"),
        (GET, "--basic-auth-user-file"),
    ]
    kinds = {"missing": "missing.yaml", "directory": "a-directory", "binary": "not UTF-8"}
    return [
        Case(f"{' '.join(args[:2])} {flag} {kind}", (*args, flag, f"{{{kind}}}"), expected)
        for args, flag in readers
        for kind, expected in kinds.items()
    ]


CASES = [
    # the report extra: `pip install nvwatch` alone, as the README's first command does
    *(
        Case(f"{' '.join(args[:2])} without {module}", args, "'nvwatch[report]'", hide=module)
        for module in ("numpy", "matplotlib")
        for args in (REPORT, PREVIEW)
    ),
    # a port in use
    Case(
        "serve on a port in use",
        ("serve", "--sources", "host", "--listen", "127.0.0.1:{busy}"),
        "cannot listen on 127.0.0.1:{busy}",
    ),
    # a simulated node (its banner) and its BMC (the probe's line) used to log first
    Case(
        "simulated serve on a port in use",
        ("serve", "--simulate", "dgx-h100", "--listen", "127.0.0.1:{busy}"),
        "cannot listen on 127.0.0.1:{busy}: Address already in use",
    ),
    Case(
        "simulate fleet on a port in use",
        (*FLEET, "--nodes", "2", "--base-port", "{busy}", "--duration", "5s"),
        "cannot listen on 127.0.0.1:{busy}: Address already in use",
    ),
    Case(
        "dashboards preview of a dashboard that does not exist",
        (*PREVIEW, "--dashboard", "nvwatch-capacity"),
        "nvwatch-capacity.json: not a dashboard; choose from",
    ),
    # outputs
    *_out_cases(),
    Case(
        "alerts build --docs unwritable",
        (*ALERTS, "--no-kubernetes", "--docs", "{unwritable}/alerts.md"),
        "cannot write to --docs",
    ),
    Case(
        "alerts build --docs a directory",
        (*ALERTS, "--no-kubernetes", "--docs", "{directory}"),
        "is a directory",
    ),
    Case(
        "alerts build --kubernetes unwritable",
        (*ALERTS, "--no-docs", "--kubernetes", "{unwritable}"),
        "cannot write to --kubernetes",
    ),
    Case(
        "dashboards build --kubernetes under a file",
        (*DASHBOARDS, "--kubernetes", "{under_file}"),
        "not a directory",
    ),
    Case(
        "simulate history --out a directory", (*HISTORY, "--out", "{directory}"), "is a directory"
    ),
    Case(
        "simulate fleet --file-sd unwritable",
        (*FLEET, "--nodes", "1", "--base-port", "{busy}", "--file-sd", "{unwritable}/sd.json"),
        "cannot write to --file-sd",
    ),
    # configs that cannot be read
    *_config_cases(),
]


@pytest.fixture
def paths(tmp_path: Path) -> Iterator[Paths]:
    Path(tmp_path / "a-file").write_text("not a directory\n")
    (tmp_path / "a-directory").mkdir()
    (tmp_path / "binary.yaml").write_bytes(b"interval: \xff\xfe5s\n")
    (tmp_path / "cluster.csv").write_text(
        "hostname,address,node_class,rack\ndgx-001,10.0.0.1,dgx-h100,rack-01\n"
    )
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        yield Paths(tmp_path, busy.getsockname()[1])


def _run(case: Case, paths: Paths) -> subprocess.CompletedProcess[str]:
    setup = f"import sys; sys.modules[{case.hide!r}] = None\n" if case.hide else ""
    code = f"{setup}from nvwatch.agent.cli import main\nmain({case.argv(paths)!r})"
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=CLEAN_ENV,
        cwd=paths.tmp,
        check=False,
    )


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_bad_input_is_one_line_and_exit_2(case: Case, paths: Paths) -> None:
    result = _run(case, paths)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    (line,) = lines
    assert line.startswith("nvwatch: error: "), line
    assert case.expected.format(busy=paths.busy_port) in line
    assert result.stdout == ""
    assert result.returncode == EXIT_BAD_INPUT, line
    # nothing written where it was refused
    assert not (paths.tmp / "outputs").exists()


def test_the_readme_documents_the_exit_codes() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Exit codes", 1)[1].split("\n#", 1)[0]
    codes = dict(re.findall(r"^\| `(\d+)` \| (.+) \|$", section, flags=re.MULTILINE))
    assert set(codes) == {"0", "1", "2", "3", "130"}
    # 3: `nvwatch job` found no summary of the job (tests/report/test_job_command.py)
    assert "`job`" in codes["3"] and "pending" in codes["3"], codes
    for words in ("bad input", "unwritable", "port in use", "report extra", "unreadable"):
        assert words in codes[str(EXIT_BAD_INPUT)], codes
