"""Config files that are not config files: one line naming the file, exit 2, no traceback.

Through real `nvwatch dump --config FILE` processes, as an operator (or systemd) sees
them. Before: a binary file exited 1 with a traceback, and a 52 MB YAML list ran past
120 s and 2.87 GB of memory without starting.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from nvwatch.agent.config import ConfigError, load_config_file
from nvwatch.common.yaml_safe import MAX_CONFIG_BYTES, read_config_text

NVWATCH = [sys.executable, "-m", "nvwatch.agent.cli"]
ALLOWED = {"interval", "sources", "scenario", "sysfs_root"}

# name -> file content; every one must be refused with a reason in the message
BAD_FILES: dict[str, tuple[bytes, str]] = {
    "binary": (bytes(range(256)) * 16, "not UTF-8 text"),
    "elf": (b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 64, "NUL bytes"),
    "too-large": (
        b"sources: [" + b"host, " * (MAX_CONFIG_BYTES // 5) + b"host]\n",
        f"larger than the limit of {MAX_CONFIG_BYTES:,} bytes",
    ),
    "syntax": (b"interval: 5s\nsources: [host\n", "not valid YAML at line 3, column 1"),
    "list": (b"- interval\n- 5s\n", "expected a mapping of option: value"),
    "nested-value": (b"interval: {every: 5s}\n", "interval: expected a value or a list"),
    "alias": (b"sources: &s host\nsysfs-root: *s\n", "aliases (*name) are not allowed"),
    "deep": (b"sources: " + b"[" * 100_000 + b"]" * 100_000 + b"\n", "nested too deeply"),
    "unknown-key": (b"intervall: 5s\n", "unknown key 'intervall'"),
    "tab-indent": (b"interval:\n\t5s\n", "not valid YAML"),
}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*NVWATCH, "dump", "--sources", "host", "--settle", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_a_bad_config_file_is_one_line_naming_it_and_exit_2(tmp_path: Path, case: str) -> None:
    content, reason = BAD_FILES[case]
    path = tmp_path / f"{case}.yaml"
    path.write_bytes(content)
    started = time.monotonic()
    completed = _run("--config", str(path))
    assert time.monotonic() - started < 30
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert "Traceback" not in completed.stderr
    lines = completed.stderr.splitlines()
    assert len(lines) == 1, lines[:5]
    assert lines[0].startswith("nvwatch: error: ")
    assert str(path) in lines[0]
    assert reason in lines[0]
    assert completed.stdout == ""


@pytest.mark.parametrize("kind", ["missing", "directory"])
def test_a_config_path_that_is_no_file_is_named(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "nvwatch.yaml"
    if kind == "directory":
        path.mkdir()
    completed = _run("--config", str(path))
    assert completed.returncode == 2
    (line,) = completed.stderr.splitlines()
    assert line.startswith("nvwatch: error: ") and str(path) in line


def test_a_good_config_file_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "nvwatch.yaml"
    path.write_text("# comment\ninterval: 5s\nsources: [host]\n")
    completed = _run("--config", str(path))
    assert completed.returncode == 0, completed.stderr
    assert "nvwatch_host_load1" in completed.stdout


def test_a_config_file_at_the_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "nvwatch.yaml"
    body = b"interval: 5s\n"
    path.write_bytes(body + b"#" * (MAX_CONFIG_BYTES - len(body) - 1) + b"\n")
    assert load_config_file(path, ALLOWED) == {"interval": "5s"}
    path.write_bytes(path.read_bytes() + b"\n")
    with pytest.raises(ConfigError, match="larger than the limit"):
        load_config_file(path, ALLOWED)


def test_read_config_text_names_its_kind_and_file(tmp_path: Path) -> None:
    # the loader the web config shares: its errors say which kind of file it was
    path = tmp_path / "web.yml"
    path.write_bytes(b"\xff\xfe")
    with pytest.raises(ConfigError, match=f"web config {path} is not UTF-8 text"):
        read_config_text(path, "web config")
    path.write_text("tls_server_config: {}\n")
    assert read_config_text(path, "web config", limit=100) == "tls_server_config: {}\n"
    with pytest.raises(ConfigError, match=f"web config {path} is larger than the limit of 10"):
        read_config_text(path, "web config", limit=10)


def test_scenario_lists_stay_lists(tmp_path: Path) -> None:
    path = tmp_path / "nvwatch.yaml"
    path.write_text("scenario: [idle, ecc-dbe@2]\nsources: [nvml, host]\n")
    assert load_config_file(path, ALLOWED) == {
        "scenario": ["idle", "ecc-dbe@2"],
        "sources": "nvml,host",
    }
