"""`nvwatch profiles` says what each profile simulates, checked against the profile's
own GPU, NVLink and NIC lists (not against a copy of the listing)."""

from __future__ import annotations

from collections import Counter

import pytest
from click.testing import CliRunner

from nvwatch.agent.cli import cli
from nvwatch.sim.profiles import PROFILES


def _listing() -> dict[str, str]:
    result = CliRunner().invoke(cli, ["profiles"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    return {line.split()[0]: line for line in lines if line and not line[0].isspace()}


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_the_listing_matches_the_profile(name: str) -> None:
    profile = PROFILES[name]
    line = _listing()[name]
    gpus, nvlink, ports = (part.strip() for part in line[len(name) :].split("|"))
    # every board the simulator enumerates, with its count, and nothing else
    listed = Counter({
        board.split("x ", 1)[1]: int(board.split("x ", 1)[0]) for board in gpus.split(" + ")
    })  # fmt: skip
    assert listed == Counter(gpu.name for gpu in profile.gpus)
    # NVLink where the profile wires it
    with_links = [i for i, links in enumerate(profile.nvlinks) if links]
    if not with_links:
        assert nvlink == "no NVLink"
    elif len(with_links) == profile.gpu_count and len(set(map(len, profile.nvlinks))) == 1:
        assert nvlink == f"{len(profile.nvlinks[0])} NVLink/GPU"
    else:
        for i in with_links:
            assert f"{len(profile.nvlinks[i])} NVLink on GPU" in nvlink
        listed_gpus = {int(g) for part in nvlink.split(";") for g in part.split()[-1].split(",")}
        assert listed_gpus == set(with_links)
    # the RDMA ports the simulated sysfs tree has
    if profile.nics:
        assert sum(int(p.split("x ", 1)[0]) for p in ports.split(" + ")) == len(profile.nics)
    else:
        assert ports == "no InfiniBand/RoCE port"


def test_the_mixed_workstation_and_the_station() -> None:
    """The two the listing got wrong: a GTX 1080 Ti pair and an NVLinked RTX 2080 Ti pair;
    a DGX Station whose 10GbE ports are no RDMA port (not "0 NIC")."""
    listing = _listing()
    workstation = PROFILES["geforce-workstation"]
    boards = Counter(gpu.name for gpu in workstation.gpus)
    assert len(boards) == 2
    for board, count in boards.items():
        assert f"{count}x {board}" in listing["geforce-workstation"]
    linked = {workstation.gpus[i].name for i, links in enumerate(workstation.nvlinks) if links}
    assert linked == {"NVIDIA GeForce RTX 2080 Ti"}
    assert "0 NIC" not in listing["dgx-station"]
    assert "no InfiniBand/RoCE port" in listing["dgx-station"]
