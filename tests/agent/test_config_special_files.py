"""A FIFO or a device named as a config file is refused at once, in one line, exit 2.

Before, open() of a FIFO with no writer blocked: `serve --config`, `--bmc-config`, its
password_file, `inventory --in` and the mixin's `--config` hung for ever (here: until
the timeout killed them), while `--web-config` already refused a FIFO; /dev/zero was
read up to the size limit and refused as too large. Every case runs the real CLI.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from nvwatch.common.regular_files import NotRegularFile, open_regular, read_regular
from tests.agent.refusals import refusal_line

SERVE = ["serve", "--sources", "host", "--listen", "127.0.0.1:0"]
DEVICE = Path("/dev/zero")
REPORT = ["report", "--prometheus", "https://127.0.0.1:9", "--range", "1d", "--out", "{out}"]


def _direct(*args: str) -> Callable[[Path, Path], list[str]]:
    """A command whose flag names the special file itself: `{special}` in `args`."""
    return lambda special, tmp: [a.format(special=special, out=tmp / "out") for a in args]


def _bmc_password(special: Path, tmp: Path) -> list[str]:
    config = tmp / "ipmi.yml"
    config.write_text(f"modules:\n  dgx:\n    user: monitor\n    password_file: {special}\n")
    return [*SERVE, "--bmc-config", str(config)]


def _web_pem(special: Path, tmp: Path) -> list[str]:
    config = tmp / "web.yml"
    config.write_text(f"tls_server_config:\n  cert_file: {special}\n  key_file: {special}\n")
    return [*SERVE, "--web-config", str(config)]


READERS: dict[str, tuple[str, Callable[[Path, Path], list[str]]]] = {
    # name -> (suffix of the special file, argv)
    "serve --config": (".yaml", _direct(*SERVE, "--config", "{special}")),
    "dump --config": (".yaml", _direct("dump", "--settle", "0", "--config", "{special}")),
    "serve --web-config": (".yml", _direct(*SERVE, "--web-config", "{special}")),
    "serve --bmc-config": (".yml", _direct(*SERVE, "--bmc-config", "{special}")),
    "bmc password_file": ("", _bmc_password),
    "web config cert_file": (".pem", _web_pem),
    "inventory --in csv": (".csv", _direct("inventory", "--in", "{special}", "--out", "{out}")),
    "inventory --in yaml": (".yaml", _direct("inventory", "--in", "{special}", "--out", "{out}")),
    # the report's credentials and CA: read before any query (the port is never asked)
    "report --basic-auth-password-file": (
        "",
        _direct(*REPORT, "--basic-auth-user", "u", "--basic-auth-password-file", "{special}"),
    ),
    "report --bearer-token-file": ("", _direct(*REPORT, "--bearer-token-file", "{special}")),
    "report --ca-file": (".pem", _direct(*REPORT, "--ca-file", "{special}")),
    "alerts build --config": (
        ".yaml",
        _direct("alerts", "build", "--out", "{out}", "--config={special}"),
    ),
}


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path: Path, reader: str) -> None:
    suffix, argv = READERS[reader]
    fifo = tmp_path / f"config{suffix}"
    os.mkfifo(fifo)
    line = refusal_line(argv(fifo, tmp_path))
    assert f"{fifo}: a FIFO (named pipe), not a regular file" in line, line
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("reader", sorted(READERS))
def test_a_character_device_is_refused_unread(tmp_path: Path, reader: str) -> None:
    suffix, argv = READERS[reader]
    # the device under the name the command wants (inventory picks a format by suffix)
    special = tmp_path / f"config{suffix}"
    special.symlink_to(DEVICE)
    line = refusal_line(argv(special, tmp_path))
    assert f"{special}: a character device, not a regular file" in line, line


def test_a_regular_file_behind_a_symlink_is_read(tmp_path: Path) -> None:
    (tmp_path / "real.yaml").write_text("a: 1\n")
    (tmp_path / "link.yaml").symlink_to(tmp_path / "real.yaml")
    assert read_regular(tmp_path / "link.yaml", 100) == b"a: 1\n"
    assert read_regular(tmp_path / "real.yaml", 2) == b"a: "  # the limit and one byte more


def test_what_is_refused_says_what_it_is(tmp_path: Path) -> None:
    with pytest.raises(NotRegularFile, match="a directory, not a regular file"):
        open_regular(tmp_path)
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "absent")
