"""deploy/slurm/nvwatch-healthcheck.sh as a real slurmd's HealthCheckProgram.

A one-node Slurm (cluster.py) runs the script at start-up and every 5 s, with `nvwatch
doctor` on a simulated DGX H100 whose scenario the test sets in a file: with the NVIDIA
driver broken the node is drained, with the reason doctor gave; once doctor passes it is
resumed; a drain with another reason (an admin's) is left alone.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from tests.slurm.cluster import REPO, Cluster, slurm_cluster
from tests.slurm.test_real_slurm import _need_slurm

pytestmark = pytest.mark.timeout(300)
SCRIPT = REPO / "deploy" / "slurm" / "nvwatch-healthcheck.sh"
LIMIT_S = 60.0  # a few health-check intervals of 5 s, each a simulated doctor run


def _node(cluster: Cluster) -> tuple[str, str]:
    """(state, reason) as sinfo shows them."""
    state, _, reason = cluster.run("sinfo", "-h", "-o", "%T|%E").partition("|")
    return state, reason


def _until(cluster: Cluster, what: str, check: object) -> tuple[str, str]:
    deadline = time.monotonic() + LIMIT_S
    while True:
        node = _node(cluster)
        if check(node):  # type: ignore[operator]
            return node
        assert time.monotonic() < deadline, f"{what} within {LIMIT_S}s: {node}"
        time.sleep(0.5)


def test_a_source_down_drains_the_node_and_a_pass_resumes_it(tmp_path: Path) -> None:
    _need_slurm()
    scenario = tmp_path / "scenario"
    scenario.write_text("nvml-driver-broken,from=0\n")
    tmp_path.chmod(0o755)
    nvwatch = Path(sys.executable).parent / "nvwatch"
    command = (
        f'S=$(cat {scenario}); [ -n "$S" ] && export NVWATCH_SCENARIO="$S"; '
        f"NVWATCH={nvwatch} NVWATCH_SIMULATE=dgx-h100 exec {SCRIPT}"
    )
    with slurm_cluster("linuxproc", health_check=command) as cluster:
        _, reason = _until(cluster, "drained", lambda n: n[0] == "drained")
        assert reason.startswith("nvwatch: nvml down: 8 NVIDIA GPUs on PCI but NVML failed")

        scenario.write_text("")  # the driver is back
        _until(cluster, "resumed", lambda n: n == ("idle", "none"))

        # another reason is not ours to lift
        cluster.run(
            "scontrol", "update", f"NodeName={cluster.host}", "State=DRAIN", "Reason=admin: RMA"
        )
        time.sleep(12)  # two health checks, both passing
        assert _node(cluster) == ("drained", "admin: RMA")
