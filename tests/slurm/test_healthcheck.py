"""deploy/slurm/nvwatch-healthcheck.sh as a real slurmd's HealthCheckProgram.

A one-node Slurm (cluster.py), shared by the tests of this file, runs the script at
start-up and every 5 s, with `nvwatch doctor` on a simulated DGX H100 whose scenario the
test sets in a file. Each run appends the scenario it ran with to a log once the script
has returned, so a test waits for runs (not for time) and checks the node after each.
One failed run (a blip) leaves the node alone; three in a row (NVWATCH_HEALTHCHECK_FAILURES)
drain it with the reason doctor gave; a pass resumes it; a drain with another reason (an
admin's) is left alone.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.slurm.cluster import REPO, Cluster, slurm_cluster
from tests.slurm.test_real_slurm import _need_slurm

pytestmark = pytest.mark.timeout(300)
SCRIPT = REPO / "deploy" / "slurm" / "nvwatch-healthcheck.sh"
BROKEN = "nvml-driver-broken,from=0"
PASS = "pass"  # the log's word for a run without a scenario
FAILURES = 3
RUN_LIMIT_S = 30.0  # one health-check interval of 5 s and a simulated doctor run, with room


@dataclass
class HealthCheck:
    cluster: Cluster
    control: Path  # scenario: what the next run's doctor sees; runs: what each run saw

    def set(self, scenario: str) -> None:
        (self.control / "scenario").write_text(scenario if scenario != PASS else "")

    def runs(self) -> list[str]:
        path = self.control / "runs"
        return path.read_text().split() if path.exists() else []

    def node(self) -> tuple[str, str]:
        """(state, reason) as sinfo shows them, less the not-responding mark: a "*" says a
        ping of slurmd went unanswered (on a loaded test machine, while slurmd runs the
        health check), which is not what these tests are about."""
        state, _, reason = self.cluster.run("sinfo", "-h", "-o", "%T|%E").partition("|")
        return state.removesuffix("*"), reason

    def after_runs(self, scenario: str, count: int) -> Iterator[tuple[str, str]]:
        """Sets the scenario and yields the node as each of the next `count` runs with it
        has ended (a run already under way with the one before is not counted)."""
        self.set(scenario)
        seen = len(self.runs())
        for n in range(1, count + 1):
            deadline = time.monotonic() + RUN_LIMIT_S
            while self.runs()[seen:].count(scenario) < n:
                assert time.monotonic() < deadline, f"run {n} with {scenario} in {RUN_LIMIT_S}s"
                time.sleep(0.2)
            yield self.node()

    def settle(self) -> None:
        """A passing run, and the node in service: each test starts from there."""
        list(self.after_runs(PASS, 1))
        if self.node() != ("idle", "none"):
            self.cluster.run("scontrol", "update", f"NodeName={self.cluster.host}", "State=RESUME")
        assert self.node() == ("idle", "none")


@pytest.fixture(scope="module")
def health_check(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HealthCheck]:
    _need_slurm()
    control = tmp_path_factory.mktemp("healthcheck")
    control.chmod(0o755)
    (control / "scenario").write_text("")
    nvwatch = Path(sys.executable).parent / "nvwatch"
    command = (
        f'S=$(cat {control}/scenario); [ -n "$S" ] && export NVWATCH_SCENARIO="$S"; '
        f"NVWATCH={nvwatch} NVWATCH_SIMULATE=dgx-h100 "
        f"NVWATCH_HEALTHCHECK_STATE_DIR={control}/state NVWATCH_HEALTHCHECK_FAILURES={FAILURES} "
        f'{SCRIPT}; echo "${{S:-{PASS}}}" >> {control}/runs'
    )
    with slurm_cluster("linuxproc", health_check=command) as cluster:
        yield HealthCheck(cluster, control)


def _each(nodes: Iterator[tuple[str, str]], check: Callable[[int, tuple[str, str]], None]) -> None:
    for n, node in enumerate(nodes, start=1):
        check(n, node)


def test_a_blip_does_not_drain_a_persistent_failure_does_and_a_pass_resumes(
    health_check: HealthCheck,
) -> None:
    health_check.settle()
    for node in health_check.after_runs(BROKEN, 1):
        assert node == ("idle", "none"), "one failed run drained the node"
    for node in health_check.after_runs(PASS, 1):
        assert node == ("idle", "none")
    # the pass reset the count: it takes FAILURES failed runs again
    assert not (health_check.control / "state" / "healthcheck-failures").exists()

    def drained_on_the_last(n: int, node: tuple[str, str]) -> None:
        if n < FAILURES:
            assert node == ("idle", "none"), f"drained after {n} failed runs"
        else:
            state, reason = node
            assert state == "drained"
            assert reason.startswith("nvwatch: nvml down: 8 NVIDIA GPUs on PCI but NVML failed")

    _each(health_check.after_runs(BROKEN, FAILURES), drained_on_the_last)
    for node in health_check.after_runs(PASS, 1):
        assert node == ("idle", "none"), "the driver is back: our drain is lifted"


def test_a_drain_with_another_reason_is_neither_taken_over_nor_lifted(
    health_check: HealthCheck,
) -> None:
    health_check.settle()
    cluster = health_check.cluster
    cluster.run(
        "scontrol", "update", f"NodeName={cluster.host}", "State=DRAIN", "Reason=admin: RMA"
    )
    admins = ("drained", "admin: RMA")
    for node in health_check.after_runs(PASS, 2):
        assert node == admins
    # doctor's reason in its place would let the next pass resume the admin's node
    for node in health_check.after_runs(BROKEN, FAILURES + 1):
        assert node == admins
    for node in health_check.after_runs(PASS, 1):
        assert node == admins
    cluster.run("scontrol", "update", f"NodeName={cluster.host}", "State=RESUME")
