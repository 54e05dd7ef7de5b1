"""What `nvwatch profiles` says about each profile, derived from the profile's own data.

Nothing here is a copied table: the GPU mix comes from `Profile.gpus`, the NVLink wiring
from `Profile.nvlinks`, the RDMA ports from `Profile.nics`, so the listing cannot drift
from what the simulator runs (a mixed workstation shows both of its boards, and NVLink
only where a bridge is).
"""

from __future__ import annotations

from collections import Counter

from nvwatch.sim.profiles import Profile


def gpu_mix(profile: Profile) -> str:
    """'8x NVIDIA H100 80GB HBM3', '2x ... GTX 1080 Ti + 2x ... RTX 2080 Ti'."""
    counts = Counter(gpu.name for gpu in profile.gpus)  # insertion order: board order
    return " + ".join(f"{count}x {name}" for name, count in counts.items())


def nvlink_wiring(profile: Profile) -> str:
    """'18 NVLink/GPU', 'no NVLink', or per group where GPUs differ ('2 NVLink on GPU 2,3')."""
    per_gpu = [len(links) for links in profile.nvlinks]
    if not any(per_gpu):
        return "no NVLink"
    if len(set(per_gpu)) == 1:
        return f"{per_gpu[0]} NVLink/GPU"
    groups: dict[int, list[str]] = {}
    for index, count in enumerate(per_gpu):
        if count:
            groups.setdefault(count, []).append(str(index))
    return "; ".join(f"{count} NVLink on GPU {','.join(gpus)}" for count, gpus in groups.items())


def rdma_ports(profile: Profile) -> str:
    """'8x InfiniBand 400 Gb/s', '1x Ethernet (RoCE) 25 Gb/s', 'no InfiniBand/RoCE port'.

    Only RDMA ports are simulated (a plain Ethernet NIC has no /sys/class/infiniband
    entry and nothing for the agent to read); the description names any other NIC.
    """
    if not profile.nics:
        return "no InfiniBand/RoCE port"
    kinds = Counter(
        ("InfiniBand" if nic.link_layer == "InfiniBand" else "Ethernet (RoCE)")
        + " "
        + nic.rate.split("(")[0].replace("/sec", "/s").strip()
        for nic in profile.nics
    )
    return " + ".join(f"{count}x {kind}" for kind, count in kinds.items())


def summary_lines(profile: Profile) -> list[str]:
    """Two lines: name, GPUs, NVLink, RDMA ports; then the description, indented."""
    return [
        f"{profile.name:<20} {gpu_mix(profile)} | {nvlink_wiring(profile)} | {rdma_ports(profile)}",
        f"{'':<20} {profile.description}",
    ]
