"""The inventory CSV: what Excel writes is read, and a big file fails at its first mistake
without first holding the whole file in memory.

Before, a CSV that starts with a UTF-8 byte-order mark (Excel's "CSV UTF-8") was refused
as "unknown column '\\ufeffhostname'", and a 200,000-row inventory took about 240 MB
before failing at its line 252.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nvwatch.agent.cli import EXIT_BAD_INPUT
from nvwatch.agent.inventory import load_inventory
from nvwatch.common.yaml_safe import ConfigError

HEADER = "hostname,address,node_class,rack\n"
# what reading the rows ahead of a mistake may add to the process's peak; reading a
# 200,000-row file whole added about 240 MB
ALLOWED_GROWTH_KB = 24 * 1024


def _row(n: int) -> str:
    return f"dgx-{n:06d},10.{n >> 16 & 255}.{n >> 8 & 255}.{n & 255},dgx-h100,rack-{n // 32:04d}\n"


def _inventory(path: Path, rows: int, bad_line: int) -> Path:
    """`rows` nodes; the one on file line `bad_line` (the header is line 1) has no address."""
    with path.open("w", encoding="utf-8") as file:
        file.write(HEADER)
        for n in range(1, rows + 1):
            line = _row(n)
            file.write(line.replace(",10.", ",not-an-address-", 1) if n + 1 == bad_line else line)
    return path


def test_a_byte_order_mark_is_read_as_excel_means_it(tmp_path: Path) -> None:
    path = tmp_path / "cluster.csv"
    path.write_bytes(b"\xef\xbb\xbf" + (HEADER + _row(1) + _row(2)).encode())
    nodes = load_inventory(path)
    assert [(n.hostname, n.address, n.line) for n in nodes] == [
        ("dgx-000001", "10.0.0.1", 2),
        ("dgx-000002", "10.0.0.2", 3),
    ]
    # before a comment line too, and through the command
    path.write_bytes(b"\xef\xbb\xbf# address plan\r\n" + (HEADER + _row(1)).encode())
    completed = subprocess.run(
        [sys.executable, "-m", "nvwatch.agent.cli", "inventory", "--in", str(path), "--out",
         str(tmp_path / "sd")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr
    groups = json.loads((tmp_path / "sd" / "nvwatch-dgx-h100.json").read_text())
    assert groups[0]["labels"]["instance"] == "dgx-000001"


def test_quoted_fields_crlf_and_comments_still_load(tmp_path: Path) -> None:
    path = tmp_path / "cluster.csv"
    path.write_bytes(
        b"# plan\r\nhostname, address ,node_class,rack,cluster\r\n\r\n"
        b'"dgx-1","10.0.0.1",dgx,"r1", c1\r\n# retired: dgx-2\r\ndgx-3,10.0.0.3,dgx,r1,c1'
    )
    nodes = load_inventory(path)
    assert [(n.hostname, n.line, n.rack, n.cluster) for n in nodes] == [
        ("dgx-1", 4, "r1", "c1"),
        ("dgx-3", 6, "r1", "c1"),
    ]


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (HEADER.encode() + _row(1).encode() + b"dgx-2,10.0.0.2,\xff\xfe,r1\n", "not UTF-8 text"),
        (HEADER.encode() + b"dgx-1,10.0.0.1,dgx,r\x001\n", "contains NUL bytes (line 2)"),
        (b"hostname,address,node_class,rack,hostname\n" + _row(1).encode(),
         "column hostname given twice"),
        (HEADER.encode() + b'dgx-1,"' + b"x" * 200_000 + b'"\n', ":2: not valid CSV: field larger"),
        (HEADER.encode() + b"dgx-1,10.0.0.1,dgx,r1,c,x\n", ":2: 6 fields but the header has 4"),
        (b"# only a comment\n\n", "is empty"),
    ],
    ids=["not-utf8", "nul", "column-twice", "huge-field", "extra-field", "empty"],
)  # fmt: skip
def test_a_bad_csv_is_one_line_naming_the_file(
    tmp_path: Path, content: bytes, fragment: str
) -> None:
    path = tmp_path / "cluster.csv"
    path.write_bytes(content)
    with pytest.raises(ConfigError) as raised:
        load_inventory(path)
    message = str(raised.value)
    assert str(path) in message and fragment in message and "\n" not in message, message


def test_a_yaml_node_that_gives_a_column_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text("- {hostname: a, address: 10.0.0.1, node_class: c, rack: r1, Rack: r2}\n")
    with pytest.raises(ConfigError, match="node #1 gives rack twice"):
        load_inventory(path)


# Runs the command in a child that writes its peak resident size (ru_maxrss, KiB on
# Linux) to a file as it exits, whatever the exit code.
_PEAK = """
import atexit, resource, sys
from pathlib import Path
from nvwatch.agent.cli import main
report = Path(sys.argv[1])
atexit.register(lambda: report.write_text(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)))
main(sys.argv[2:])
"""


def _peak_kb(inventory: Path, tmp_path: Path) -> tuple[int, str]:
    report = tmp_path / f"{inventory.stem}.peak"
    argv = ["inventory", "--in", str(inventory), "--out", str(tmp_path / "sd")]
    completed = subprocess.run(
        [sys.executable, "-c", _PEAK, str(report), *argv],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert completed.returncode == EXIT_BAD_INPUT, completed.stderr[-2000:]
    (line,) = completed.stderr.splitlines()
    return int(report.read_text()), line


def test_a_big_inventory_fails_at_its_first_mistake_in_bounded_memory(tmp_path: Path) -> None:
    small = _inventory(tmp_path / "small.csv", 300, bad_line=252)
    big = _inventory(tmp_path / "big.csv", 200_000, bad_line=252)
    assert big.stat().st_size > 8 << 20  # megabytes of rows after the mistake
    small_kb, small_line = _peak_kb(small, tmp_path)
    big_kb, big_line = _peak_kb(big, tmp_path)
    for path, line in ((small, small_line), (big, big_line)):
        assert f"{path}:252: invalid address 'not-an-address-0.0.251'" in line, line
    # the same rows are read before the same mistake: the rows after it cost nothing
    assert big_kb - small_kb < ALLOWED_GROWTH_KB, (small_kb, big_kb)
    assert not (tmp_path / "sd").exists()
