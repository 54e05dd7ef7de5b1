"""read_fairshare when sshare is missing, fails, hangs or prints what it never prints.

Each case puts an `sshare` of its own first on PATH (a shell script run for real), and
the answer must be a SchedulerError whose message is one line naming sshare, never a
traceback and never a table of made-up numbers. The well-formed cases are checked against
the real sshare in test_fairshare.py.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from nvwatch.agent.sources.scheduler.fairshare import FIELDS, read_fairshare
from nvwatch.agent.sources.scheduler.slurm_commands import SchedulerError

HEADER = "|".join(FIELDS)
ROOT = "root||0.000000|1.000000|"
ACCOUNT = " physics||0.700000|0.250000|"


def _env(tmp_path: Path) -> dict[str, str]:
    """PATH of tmp_path alone, SLURM_CONF a loopback slurm.conf of its own (no Slurm
    command runs without one)."""
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=test\nSlurmctldHost=localhost(127.0.0.1)\n")
    return {"PATH": str(tmp_path), "SLURM_CONF": str(conf)}


def _sshare(tmp_path: Path, body: str) -> dict[str, str]:
    """An environment whose PATH finds only a script `sshare` running `body`."""
    script = tmp_path / "sshare"
    script.write_text(f"#!/bin/sh\n{body}\n")
    script.chmod(0o755)
    return _env(tmp_path)


def _printing(tmp_path: Path, *lines: str) -> dict[str, str]:
    (tmp_path / "out").write_text("".join(f"{line}\n" for line in lines))
    return _sshare(tmp_path, f"exec /bin/cat {tmp_path / 'out'}")


def _one_line_failure(env: dict[str, str], timeout_s: float = 5.0) -> str:
    with pytest.raises(SchedulerError) as caught:
        read_fairshare(timeout_s, env)
    message = str(caught.value)
    assert "\n" not in message and message.startswith("sshare"), message
    return message


def test_missing(tmp_path: Path) -> None:
    assert "not found" in _one_line_failure(_env(tmp_path))


def test_failing_names_slurms_own_reason(tmp_path: Path) -> None:
    reason = "Couldn't get shares from controller: Unable to contact slurm controller"
    env = _sshare(tmp_path, f'echo "{reason}" >&2; echo "more detail" >&2; exit 255')
    assert _one_line_failure(env) == f"sshare failed: {reason}"


def test_hanging_is_killed_at_the_deadline(tmp_path: Path) -> None:
    env = _sshare(tmp_path, "exec /bin/sleep 30")
    started = time.monotonic()
    assert "did not finish within 0.5 s" in _one_line_failure(env, timeout_s=0.5)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize(
    ("lines", "names"),
    [
        ((), "printed nothing"),
        (("Account|User|RawShares", ROOT), "unexpected header"),
        (("<html>503 Service Unavailable</html>",), "unexpected header"),
        ((HEADER, ROOT, " physics||0.7"), "line 3: 3 fields, not 5"),
        ((HEADER, ROOT, " physics|x|y|0.7|0.2|0.5"), "line 3: 6 fields, not 5"),
        ((HEADER, ROOT, " physics||seventy|0.25|"), "line 3: NormShares is not a number"),
        ((HEADER, ROOT, " physics||0.7|nan|"), "line 3: EffectvUsage is not a number"),
        ((HEADER, ROOT, " physics||0.7|0.25|inf"), "line 3: FairShare is not a number"),
        ((HEADER, ROOT, " ||0.7|0.25|"), "line 3: no account"),
        ((HEADER, ROOT, ACCOUNT, ACCOUNT), "line 4: account 'physics' twice"),
    ],
)
def test_garbage_names_the_line(tmp_path: Path, lines: tuple[str, ...], names: str) -> None:
    assert names in _one_line_failure(_printing(tmp_path, *lines))


def test_a_long_garbage_line_is_cut_short(tmp_path: Path) -> None:
    message = _one_line_failure(_printing(tmp_path, HEADER, ROOT, " physics|" + "x\ty" * 500))
    assert "\\t" in message and len(message) < 200


def test_bytes_that_are_not_text(tmp_path: Path) -> None:
    (tmp_path / "out").write_bytes(HEADER.encode() + b"\n\xff\xfe|\n")
    env = _sshare(tmp_path, f"exec /bin/cat {tmp_path / 'out'}")
    assert "not UTF-8" in _one_line_failure(env)


def test_an_odd_account_name_is_kept_as_printed(tmp_path: Path) -> None:
    """Slurm lowercases account names but allows most characters; they are label values,
    which may hold any text. Only the separator would break a row, and that row is named."""
    odd = "gpu-lab.ü'\"{}=,"
    env = _printing(tmp_path, HEADER, ROOT, f" {odd}||0.700000|0.250000|")
    shares = read_fairshare(5.0, env)
    assert shares is not None and [share.account for share in shares] == [odd]
    assert "line 3: 6 fields" in _one_line_failure(
        _printing(tmp_path, HEADER, ROOT, " a|b||0.7|0.25|")
    )


def test_no_rows_is_no_accounting_not_an_error(tmp_path: Path) -> None:
    assert read_fairshare(5.0, _printing(tmp_path, HEADER)) is None


def test_the_environment_reaches_sshare(tmp_path: Path) -> None:
    """SLURM_CONF names the cluster: it must be the one passed, not the process's own."""
    env = _sshare(tmp_path, f'[ "$SLURM_CONF" = {tmp_path}/slurm.conf ] || exit 3; echo "{HEADER}"')
    assert os.environ.get("SLURM_CONF") != env["SLURM_CONF"]
    assert read_fairshare(5.0, env) is None
