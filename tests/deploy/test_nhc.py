"""deploy/slurm/nhc/nvwatch.nhc, sourced by bash as NHC sources its scripts/*.nhc.

NHC (LBNL Node Health Check) is no Debian package, so each run here is one bash that
sources the file beside a stand-in for the three NHC functions the check calls: `die`
records its message and exits with its code, as NHC's does once it has marked the node
offline; `log` and `dbg` print. `nvwatch doctor` is the real one, on a simulated DGX H100
whose driver is broken or not. A failure that has not lasted NVWATCH_HEALTHCHECK_FAILURES
runs passes the check; the one that has fails it with doctor's reason.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import require_tool

pytestmark = pytest.mark.timeout(120)
CHECK = Path(__file__).resolve().parents[2] / "deploy" / "slurm" / "nhc" / "nvwatch.nhc"
NVWATCH = Path(sys.executable).parent / "nvwatch"
BROKEN = "nvml-driver-broken,from=0"
# NHC's own helpers, as far as the check uses them: `die` ends NHC's run with its code
NHC_STAND_IN = """
die() { local RET=$1; shift; printf '%s\\n' "$*" > "$DIED"; exit "$RET"; }
log() { printf 'log: %s\\n' "$*"; }
dbg() { printf 'dbg: %s\\n' "$*"; }
"""


@dataclass(frozen=True)
class Run:
    code: int
    died: str | None  # die's message, None when the check passed
    output: str


def _run(tmp_path: Path, scenario: str | None, **env: str) -> Run:
    bash = require_tool("bash")
    died = tmp_path / "died"
    died.unlink(missing_ok=True)
    environment = {
        "PATH": "/usr/bin:/bin",
        "NVWATCH": str(NVWATCH),
        "NVWATCH_SIMULATE": "dgx-h100",
        "NVWATCH_HEALTHCHECK_STATE_DIR": str(tmp_path / "state"),
        "DIED": str(died),
        **({"NVWATCH_SCENARIO": scenario} if scenario else {}),
        **env,
    }
    script = f"{NHC_STAND_IN}\nsource {CHECK}\ncheck_nvwatch_doctor\necho returned $?\n"
    done = subprocess.run(
        [bash, "-c", script], env=environment, capture_output=True, text=True, timeout=60
    )
    message = died.read_text().strip() if died.exists() else None
    if message is None:
        assert done.stdout.rstrip().endswith("returned 0"), done.stdout + done.stderr
    return Run(done.returncode, message, done.stdout + done.stderr)


def test_only_the_third_failure_in_a_row_fails_the_check_and_a_pass_starts_again(
    tmp_path: Path,
) -> None:
    first, second = _run(tmp_path, BROKEN), _run(tmp_path, BROKEN)
    assert (first.died, second.died) == (None, None)
    assert "doctor failed 2 of 3 runs in a row" in second.output

    third = _run(tmp_path, BROKEN)
    assert third.code == 1
    assert third.died is not None
    assert third.died.startswith(
        "check_nvwatch_doctor:  nvml down: 8 NVIDIA GPUs on PCI but NVML failed"
    )

    healthy = _run(tmp_path, None)
    assert healthy.died is None
    assert not (tmp_path / "state" / "nhc-failures").exists()
    # the count starts again: one failure after a pass is a blip
    assert _run(tmp_path, BROKEN).died is None


def test_the_number_of_failures_is_a_setting(tmp_path: Path) -> None:
    assert _run(tmp_path, BROKEN, NVWATCH_HEALTHCHECK_FAILURES="1").died is not None


@pytest.mark.parametrize("content", ["garbage\n", "", "08\n", "99999999999999999999\n"])
def test_a_garbled_count_counts_as_none(tmp_path: Path, content: str) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "nhc-failures").write_text(content)
    assert _run(tmp_path, BROKEN).died is None
    assert (state / "nhc-failures").read_text() == "1\n"


def test_a_count_that_cannot_be_kept_fails_the_check_at_once(tmp_path: Path) -> None:
    # a file where the state directory should be: nothing can be written under it
    (tmp_path / "state").write_text("")
    run = _run(tmp_path, BROKEN)
    assert run.died is not None
    assert "cannot keep the failure count" in run.output


def test_a_misconfigured_doctor_is_logged_and_the_check_passes(tmp_path: Path) -> None:
    run = _run(tmp_path, None, NVWATCH_SIMULATE="no-such-profile")
    assert run.died is None
    assert "doctor failed (exit 2)" in run.output
    assert not (tmp_path / "state" / "nhc-failures").exists()
