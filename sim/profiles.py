"""Hardware profiles of the simulated systems: GPUs, NVLink wiring, PCIe layout, NICs.

Figures come from public datasheets and typical `nvidia-smi -q` readings. Values marked
"~" are approximate and vary by board and driver. This module is data only: the
simulated NVML (`nvwatch.sim.nvml`) and the simulated sysfs fabric (`nvwatch.sim.fabric.fabric`)
both read it, so a GPU's PCI bus id and the HCA beside it on the same PCIe switch always
agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MIB = 1024 * 1024
GIB = 1024 * MIB
GB_PER_S = 1_000_000_000  # NVLink figures are decimal GB/s


@dataclass(frozen=True)
class GpuModel:
    """One GPU board type."""

    name: str  # what nvmlDeviceGetName returns
    architecture: str  # pascal | volta | turing | ampere | hopper
    memory_bytes: int
    memory_bandwidth_bytes_per_second: float
    tdp_watts: float  # default power limit
    min_power_limit_watts: float
    max_power_limit_watts: float
    idle_watts: float  # ~ draw with no work and clocks parked
    sm_count: int
    max_sm_clock_mhz: int
    max_memory_clock_mhz: int
    idle_sm_clock_mhz: int  # ~
    pcie_generation: int
    pcie_width: int
    nvlink_version: int  # 0: no NVLink on this board (or only via a bridge, see Profile)
    nvlink_bytes_per_second: float  # per link per direction
    ecc: bool
    row_remapping: bool  # Ampere+ HBM row remapper instead of page retirement
    fan: bool  # only boards with their own fans report a fan speed
    energy_counter: bool  # nvmlDeviceGetTotalEnergyConsumption, Volta+
    gpm: bool  # GPU performance monitoring, Hopper+
    memory_temperature: bool  # HBM temperature field (NVML_FI_DEV_MEMORY_TEMP)
    violation_counters: bool  # nvmlDeviceGetViolationStatus; consumer boards say NotSupported
    mig: bool
    temp_slowdown_c: int  # ~
    temp_shutdown_c: int  # ~
    temp_gpu_max_c: int | None  # ~ NVML_TEMPERATURE_THRESHOLD_GPU_MAX, None: NotSupported
    temp_memory_max_c: int | None  # ~ NVML_TEMPERATURE_THRESHOLD_MEM_MAX
    # Thermal model (~, calibrated so a healthy board at TDP sits well below slowdown in
    # a 25 C inlet): steady temperature = ambient + resistance x power.
    thermal_resistance_c_per_w: float
    thermal_time_constant_s: float
    vbios_version: str
    cuda_compute_capability: tuple[int, int]

    @property
    def max_graphics_clock_mhz(self) -> int:
        return self.max_sm_clock_mhz


P100_SXM2 = GpuModel(
    name="Tesla P100-SXM2-16GB",
    architecture="pascal",
    memory_bytes=16 * GIB,
    memory_bandwidth_bytes_per_second=732e9,
    tdp_watts=300,
    min_power_limit_watts=150,
    max_power_limit_watts=300,
    idle_watts=32,
    sm_count=56,
    max_sm_clock_mhz=1480,
    max_memory_clock_mhz=715,
    idle_sm_clock_mhz=405,
    pcie_generation=3,
    pcie_width=16,
    nvlink_version=1,
    nvlink_bytes_per_second=20 * GB_PER_S,
    ecc=True,
    row_remapping=False,
    fan=False,
    energy_counter=False,
    gpm=False,
    memory_temperature=False,
    violation_counters=True,
    mig=False,
    temp_slowdown_c=85,
    temp_shutdown_c=88,
    temp_gpu_max_c=None,
    temp_memory_max_c=None,
    thermal_resistance_c_per_w=0.15,
    thermal_time_constant_s=60.0,
    vbios_version="86.00.41.00.02",
    cuda_compute_capability=(6, 0),
)

V100_SXM2_16 = GpuModel(
    name="Tesla V100-SXM2-16GB",
    architecture="volta",
    memory_bytes=16 * GIB,
    memory_bandwidth_bytes_per_second=900e9,
    tdp_watts=300,
    min_power_limit_watts=150,
    max_power_limit_watts=300,
    idle_watts=42,
    sm_count=80,
    max_sm_clock_mhz=1530,
    max_memory_clock_mhz=877,
    idle_sm_clock_mhz=135,
    pcie_generation=3,
    pcie_width=16,
    nvlink_version=2,
    nvlink_bytes_per_second=25 * GB_PER_S,
    ecc=True,
    row_remapping=False,
    fan=False,
    energy_counter=True,
    gpm=False,
    memory_temperature=True,
    violation_counters=True,
    mig=False,
    temp_slowdown_c=87,
    temp_shutdown_c=90,
    temp_gpu_max_c=83,
    temp_memory_max_c=85,
    thermal_resistance_c_per_w=0.14,
    thermal_time_constant_s=60.0,
    vbios_version="88.00.80.00.01",
    cuda_compute_capability=(7, 0),
)

V100_SXM2_32 = GpuModel(
    **{
        **V100_SXM2_16.__dict__,
        "name": "Tesla V100-SXM2-32GB",
        "memory_bytes": 32 * GIB,
        "vbios_version": "88.00.98.00.01",
    }
)

V100_DGXS_32 = GpuModel(
    **{
        **V100_SXM2_32.__dict__,
        # DGX Station's water-cooled board: lower thermal resistance
        "name": "Tesla V100-DGXS-32GB",
        "thermal_resistance_c_per_w": 0.10,
    }
)

A100_SXM4_40 = GpuModel(
    name="NVIDIA A100-SXM4-40GB",
    architecture="ampere",
    memory_bytes=40960 * MIB,
    memory_bandwidth_bytes_per_second=1.555e12,
    tdp_watts=400,
    min_power_limit_watts=100,
    max_power_limit_watts=400,
    idle_watts=55,
    sm_count=108,
    max_sm_clock_mhz=1410,
    max_memory_clock_mhz=1215,
    idle_sm_clock_mhz=210,
    pcie_generation=4,
    pcie_width=16,
    nvlink_version=3,
    nvlink_bytes_per_second=25 * GB_PER_S,
    ecc=True,
    row_remapping=True,
    fan=False,
    energy_counter=True,
    gpm=False,
    memory_temperature=True,
    violation_counters=True,
    mig=True,
    temp_slowdown_c=89,
    temp_shutdown_c=92,
    temp_gpu_max_c=85,
    temp_memory_max_c=95,
    thermal_resistance_c_per_w=0.11,
    thermal_time_constant_s=50.0,
    vbios_version="92.00.36.00.02",
    cuda_compute_capability=(8, 0),
)

H100_SXM5_80 = GpuModel(
    name="NVIDIA H100 80GB HBM3",
    architecture="hopper",
    memory_bytes=81559 * MIB,  # ~ what nvidia-smi shows as memory.total on SXM5 boards
    memory_bandwidth_bytes_per_second=3.35e12,
    tdp_watts=700,
    min_power_limit_watts=200,
    max_power_limit_watts=700,
    idle_watts=70,
    sm_count=132,
    max_sm_clock_mhz=1980,
    max_memory_clock_mhz=2619,
    idle_sm_clock_mhz=345,
    pcie_generation=5,
    pcie_width=16,
    nvlink_version=4,
    nvlink_bytes_per_second=25 * GB_PER_S,
    ecc=True,
    row_remapping=True,
    fan=False,
    energy_counter=True,
    gpm=True,
    memory_temperature=True,
    violation_counters=True,
    mig=True,
    temp_slowdown_c=89,
    temp_shutdown_c=92,
    temp_gpu_max_c=87,
    temp_memory_max_c=95,
    thermal_resistance_c_per_w=0.065,
    thermal_time_constant_s=45.0,
    vbios_version="96.00.74.00.0D",
    cuda_compute_capability=(9, 0),
)

# HGX/DGX H200 board. NVIDIA's H200 datasheet: 141 GB HBM3e at 4.8 TB/s, up to 700 W
# (SXM), NVLink 900 GB/s (18 NVLink4 links), PCIe Gen5 x16, MIG up to 7 instances; the
# same GH100 die as the H100 SXM5 (132 SMs, 1980 MHz boost). The rest as the H100's (~)
# until a recorded run (tests/real_gpu/) says otherwise.
H200_SXM5_141 = GpuModel(
    **{
        **H100_SXM5_80.__dict__,
        "name": "NVIDIA H200",  # what nvidia-smi prints for the SXM board
        "memory_bytes": 143771 * MIB,  # ~ nvidia-smi memory.total on an H200 (143771 MiB)
        "memory_bandwidth_bytes_per_second": 4.8e12,
        "max_memory_clock_mhz": 3201,  # ~ nvidia-smi clocks.max.memory on an H200
        "vbios_version": "96.00.A5.00.01",  # ~ an HGX H200 VBIOS string
    }
)

T4 = GpuModel(
    name="Tesla T4",
    architecture="turing",
    memory_bytes=15360 * MIB,
    memory_bandwidth_bytes_per_second=320e9,
    tdp_watts=70,
    min_power_limit_watts=60,
    max_power_limit_watts=70,
    idle_watts=10,
    sm_count=40,
    max_sm_clock_mhz=1590,
    max_memory_clock_mhz=5001,
    idle_sm_clock_mhz=300,
    pcie_generation=3,
    pcie_width=16,
    nvlink_version=0,
    nvlink_bytes_per_second=0.0,
    ecc=True,
    row_remapping=False,
    fan=False,
    energy_counter=True,
    gpm=False,
    memory_temperature=False,
    violation_counters=True,
    mig=False,
    temp_slowdown_c=93,
    temp_shutdown_c=96,
    temp_gpu_max_c=None,
    temp_memory_max_c=None,
    thermal_resistance_c_per_w=0.6,  # passive card in a server airflow
    thermal_time_constant_s=40.0,
    vbios_version="90.04.96.00.02",
    cuda_compute_capability=(7, 5),
)

GTX_1080_TI = GpuModel(
    name="NVIDIA GeForce GTX 1080 Ti",
    architecture="pascal",
    memory_bytes=11264 * MIB,
    memory_bandwidth_bytes_per_second=484e9,
    tdp_watts=250,
    min_power_limit_watts=125,
    max_power_limit_watts=300,
    idle_watts=15,
    sm_count=28,
    max_sm_clock_mhz=1582,
    max_memory_clock_mhz=5505,
    idle_sm_clock_mhz=139,
    pcie_generation=3,
    pcie_width=16,
    nvlink_version=0,
    nvlink_bytes_per_second=0.0,
    ecc=False,
    row_remapping=False,
    fan=True,
    energy_counter=False,
    gpm=False,
    memory_temperature=False,
    violation_counters=False,
    mig=False,
    temp_slowdown_c=93,
    temp_shutdown_c=96,
    temp_gpu_max_c=None,
    temp_memory_max_c=None,
    thermal_resistance_c_per_w=0.2,
    thermal_time_constant_s=30.0,
    vbios_version="86.02.39.00.01",
    cuda_compute_capability=(6, 1),
)

RTX_2080_TI = GpuModel(
    name="NVIDIA GeForce RTX 2080 Ti",
    architecture="turing",
    memory_bytes=11264 * MIB,
    memory_bandwidth_bytes_per_second=616e9,
    tdp_watts=250,
    min_power_limit_watts=100,
    max_power_limit_watts=280,
    idle_watts=18,
    sm_count=68,
    max_sm_clock_mhz=1545,
    max_memory_clock_mhz=7000,
    idle_sm_clock_mhz=300,
    pcie_generation=3,
    pcie_width=16,
    nvlink_version=2,  # only through the optional 2-link bridge (see Profile.nvlinks)
    nvlink_bytes_per_second=25 * GB_PER_S,
    ecc=False,
    row_remapping=False,
    fan=True,
    energy_counter=True,
    gpm=False,
    memory_temperature=False,
    violation_counters=False,
    mig=False,
    temp_slowdown_c=89,
    temp_shutdown_c=94,
    temp_gpu_max_c=None,
    temp_memory_max_c=None,
    thermal_resistance_c_per_w=0.19,
    thermal_time_constant_s=30.0,
    vbios_version="90.02.17.00.58",
    cuda_compute_capability=(7, 5),
)


@dataclass(frozen=True)
class LinkEnd:
    """The far end of one NVLink link."""

    remote_type: str  # "gpu" | "switch"
    remote_index: int  # GPU index, or NVSwitch index within the system


@dataclass(frozen=True)
class Nic:
    """One InfiniBand/RoCE HCA (one port) as it appears in /sys/class/infiniband."""

    device: str  # mlx5_0
    hca_type: str  # MT4115 (ConnectX-4)
    board_id: str
    firmware_version: str
    link_layer: str  # InfiniBand | Ethernet
    rate: str  # sysfs rate string, e.g. "100 Gb/sec (4X EDR)"
    pcie_switch: int  # index into Profile.pcie_switch_socket


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    gpus: tuple[GpuModel, ...]
    # nvlinks[i][l]: what link l of GPU i connects to; () for a GPU without NVLink
    nvlinks: tuple[tuple[LinkEnd, ...], ...]
    nvswitch_count: int
    # gpu_pcie_switch[i]: the PCIe switch GPU i sits behind; None: directly on a root port
    gpu_pcie_switch: tuple[int | None, ...]
    pcie_switch_socket: tuple[int, ...]  # CPU socket of each PCIe switch
    nics: tuple[Nic, ...]
    system_power_watts: float
    driver_version: str
    cuda_driver_version: int  # nvmlSystemGetCudaDriverVersion, e.g. 12080 for 12.8
    gpu_socket_without_switch: tuple[int, ...] = field(default=())

    @property
    def gpu_count(self) -> int:
        return len(self.gpus)

    def gpu_socket(self, index: int) -> int:
        switch = self.gpu_pcie_switch[index]
        if switch is None:
            return self.gpu_socket_without_switch[index]
        return self.pcie_switch_socket[switch]


# --- PCI addressing --------------------------------------------------------------------
# Each socket's root complex is one PCI domain/bus range; a PCIe switch s gets a window of
# buses, its upstream port on the first, downstream ports on the next, endpoints after.
# The layout only needs to be self-consistent and look like a real `lspci -t`.

_SOCKET_BUS_BASE = (0x00, 0x80)


def _switch_window(profile: Profile, switch: int) -> tuple[int, int]:
    """(root bus of the switch's socket, first bus of the switch's window)."""
    socket = profile.pcie_switch_socket[switch]
    local = sum(1 for s in range(switch) if profile.pcie_switch_socket[s] == socket)
    base = _SOCKET_BUS_BASE[socket]
    return base, base + 0x10 * (local + 1)


def _endpoint_slot(profile: Profile, kind: str, index: int) -> int:
    """Position of a GPU or NIC among the endpoints of its switch (GPUs first)."""
    if kind == "gpu":
        switch = profile.gpu_pcie_switch[index]
        return sum(1 for g in range(index) if profile.gpu_pcie_switch[g] == switch)
    switch = profile.nics[index].pcie_switch
    gpus_here = sum(1 for s in profile.gpu_pcie_switch if s == switch)
    return gpus_here + sum(1 for n in profile.nics[:index] if n.pcie_switch == switch)


def pci_path(profile: Profile, kind: str, index: int) -> tuple[str, ...]:
    """The chain of sysfs directory names from the root complex down to a GPU or NIC.

    e.g. ("pci0000:00", "0000:00:01.0", "0000:10:00.0", "0000:11:00.0", "0000:12:00.0").
    The last element is the device's PCI bus id (domain:bus:device.function).
    """
    if kind not in ("gpu", "nic"):
        raise ValueError(f"kind must be gpu or nic, not {kind!r}")
    switch = profile.gpu_pcie_switch[index] if kind == "gpu" else profile.nics[index].pcie_switch
    if switch is None:
        socket = profile.gpu_socket_without_switch[index]
        base = _SOCKET_BUS_BASE[socket]
        root_port = f"0000:{base:02x}:{0x02 + index:02x}.0"
        endpoint = f"0000:{base + 0x10 * (index + 1):02x}:00.0"
        return (f"pci0000:{base:02x}", root_port, endpoint)
    base, window = _switch_window(profile, switch)
    slot = _endpoint_slot(profile, kind, index)
    local = (window - base) // 0x10 - 1
    return (
        f"pci0000:{base:02x}",
        f"0000:{base:02x}:{0x01 + local:02x}.0",  # root port
        f"0000:{window:02x}:00.0",  # switch upstream port
        f"0000:{window + 1:02x}:{slot:02x}.0",  # switch downstream port
        f"0000:{window + 2 + slot:02x}:00.0",  # the endpoint
    )


def gpu_pci_bus_id(profile: Profile, index: int) -> str:
    """NVML-style bus id of GPU `index`: 8-hex-digit domain, e.g. "00000000:12:00.0"."""
    short = pci_path(profile, "gpu", index)[-1]
    return "0000" + short


def nvswitch_pci_bus_id(switch: int) -> str:
    """Bus id of an NVSwitch; they sit on the GPU baseboard's own bus range."""
    return f"00000000:{0xC0 + switch:02x}:00.0"


# --- NVLink wiring ---------------------------------------------------------------------


def _links_from_peer_counts(
    counts: dict[tuple[int, int], int], gpus: int
) -> tuple[tuple[LinkEnd, ...], ...]:
    """Number each GPU's links in order of peer index; a double link takes two numbers."""
    per_gpu: list[list[LinkEnd]] = [[] for _ in range(gpus)]
    for gpu in range(gpus):
        for peer in range(gpus):
            n = counts.get((min(gpu, peer), max(gpu, peer)), 0) if gpu != peer else 0
            per_gpu[gpu].extend(LinkEnd("gpu", peer) for _ in range(n))
    return tuple(tuple(links) for links in per_gpu)


def _cube_mesh(double: bool) -> tuple[tuple[LinkEnd, ...], ...]:
    """DGX-1 hybrid cube-mesh: quads 0-3 and 4-7 fully connected, plus i <-> i+4.

    DGX-1 (P100): every neighbour by one link, 4 links per GPU. DGX-1 (V100): 6 links per
    GPU, two of the four neighbours doubled, as `nvidia-smi topo -m` prints on a DGX-1V:
    GPU0: NV1 1, NV1 2, NV2 3, NV2 4 (the two interleaved rings use the doubled edges).
    """
    single = {(0, 1), (0, 2), (1, 3), (2, 6), (3, 7), (4, 5), (4, 6), (5, 7)}
    doubled = {(0, 3), (0, 4), (1, 2), (1, 5), (2, 3), (4, 7), (5, 6), (6, 7)}
    counts = {pair: 1 for pair in single}
    counts.update({pair: 2 if double else 1 for pair in doubled})
    # P100 has 4 links: the quad's diagonal pairs (1,2),(0,3),(5,6),(4,7) are single links
    # and so are the i <-> i+4 edges; every GPU gets 3 quad peers + 1 cross = 4.
    return _links_from_peer_counts(counts, 8)


def _to_switches(
    gpus: int, pattern: tuple[int, ...], switch_offset_per_gpu: int = 0
) -> tuple[tuple[LinkEnd, ...], ...]:
    """Each GPU's links to NVSwitches: pattern[s] links to switch s (+ an offset)."""
    result = []
    for gpu in range(gpus):
        offset = switch_offset_per_gpu if gpu >= gpus // 2 and switch_offset_per_gpu else 0
        links: list[LinkEnd] = []
        for switch, n in enumerate(pattern):
            links.extend(LinkEnd("switch", switch + offset) for _ in range(n))
        result.append(tuple(links))
    return tuple(result)


def _station_mesh() -> tuple[tuple[LinkEnd, ...], ...]:
    counts = {(a, b): 2 for a in range(4) for b in range(a + 1, 4)}
    return _links_from_peer_counts(counts, 4)


# --- NICs ------------------------------------------------------------------------------


def _nics(
    count: int,
    hca_type: str,
    board_id: str,
    firmware: str,
    rate: str,
    per_switch: int,
    link_layer: str = "InfiniBand",
) -> tuple[Nic, ...]:
    return tuple(
        Nic(
            device=f"mlx5_{i}",
            hca_type=hca_type,
            board_id=board_id,
            firmware_version=firmware,
            link_layer=link_layer,
            rate=rate,
            pcie_switch=i // per_switch,
        )
        for i in range(count)
    )


EDR = "100 Gb/sec (4X EDR)"
HDR = "200 Gb/sec (4X HDR)"
NDR = "400 Gb/sec (4X NDR)"

PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(
            name="dgx1-p100",
            description="DGX-1 (Pascal): 8x P100 16 GB, NVLink1 hybrid cube-mesh, 4x EDR",
            gpus=(P100_SXM2,) * 8,
            nvlinks=_cube_mesh(double=False),
            nvswitch_count=0,
            gpu_pcie_switch=(0, 0, 1, 1, 2, 2, 3, 3),
            pcie_switch_socket=(0, 0, 1, 1),
            nics=_nics(4, "MT4115", "MT_2180110032", "12.28.2006", EDR, per_switch=1),
            system_power_watts=3200,
            driver_version="535.216.03",
            cuda_driver_version=12020,
        ),
        Profile(
            name="dgx1-v100",
            description="DGX-1 (Volta): 8x V100 32 GB, NVLink2 hybrid cube-mesh, 4x EDR",
            gpus=(V100_SXM2_32,) * 8,
            nvlinks=_cube_mesh(double=True),
            nvswitch_count=0,
            gpu_pcie_switch=(0, 0, 1, 1, 2, 2, 3, 3),
            pcie_switch_socket=(0, 0, 1, 1),
            nics=_nics(4, "MT4115", "MT_2180110032", "12.28.2006", EDR, per_switch=1),
            system_power_watts=3500,
            driver_version="535.216.03",
            cuda_driver_version=12020,
        ),
        Profile(
            name="dgx-station",
            description="DGX Station: 4x water-cooled V100 32 GB, fully connected NVLink, "
            "2x 10GbE (no InfiniBand)",
            gpus=(V100_DGXS_32,) * 4,
            nvlinks=_station_mesh(),
            nvswitch_count=0,
            gpu_pcie_switch=(0, 0, 1, 1),
            pcie_switch_socket=(0, 0),
            nics=(),
            system_power_watts=1500,
            driver_version="535.216.03",
            cuda_driver_version=12020,
        ),
        Profile(
            name="dgx2",
            description="DGX-2: 16x V100 32 GB on 12 NVSwitches, 8x EDR",
            gpus=(V100_SXM2_32,) * 16,
            # baseboard A: GPUs 0-7 to switches 0-5; baseboard B: GPUs 8-15 to 6-11
            nvlinks=_to_switches(16, (1, 1, 1, 1, 1, 1), switch_offset_per_gpu=6),
            nvswitch_count=12,
            gpu_pcie_switch=tuple(g // 2 for g in range(16)),
            pcie_switch_socket=(0, 0, 0, 0, 1, 1, 1, 1),
            nics=_nics(8, "MT4119", "MT_0000000008", "16.35.2000", EDR, per_switch=1),
            system_power_watts=10000,
            driver_version="535.216.03",
            cuda_driver_version=12020,
        ),
        Profile(
            name="dgx-a100",
            description="DGX A100: 8x A100 40 GB, 6 NVSwitches, 8x HDR ConnectX-6",
            gpus=(A100_SXM4_40,) * 8,
            nvlinks=_to_switches(8, (2, 2, 2, 2, 2, 2)),
            nvswitch_count=6,
            gpu_pcie_switch=(0, 0, 1, 1, 2, 2, 3, 3),
            pcie_switch_socket=(0, 0, 1, 1),
            nics=_nics(8, "MT4123", "MT_0000000223", "20.39.1002", HDR, per_switch=2),
            system_power_watts=6500,
            driver_version="570.124.06",
            cuda_driver_version=12080,
        ),
        Profile(
            name="dgx-h100",
            description="DGX H100: 8x H100 80 GB HBM3, 4 NVSwitch chips, 8x NDR ConnectX-7",
            gpus=(H100_SXM5_80,) * 8,
            nvlinks=_to_switches(8, (5, 4, 4, 5)),
            nvswitch_count=4,
            gpu_pcie_switch=(0, 0, 1, 1, 2, 2, 3, 3),
            pcie_switch_socket=(0, 0, 1, 1),
            nics=_nics(8, "MT4129", "MT_0000000838", "28.39.1002", NDR, per_switch=2),
            system_power_watts=10200,
            driver_version="570.124.06",
            cuda_driver_version=12080,
        ),
        Profile(
            name="hgx-h200",
            description="HGX H200: 8x H200 141 GB HBM3e, 4 NVSwitch chips, 8x NDR ConnectX-7",
            gpus=(H200_SXM5_141,) * 8,
            # the HGX H200 baseboard is the H100's: 18 NVLink4 links per GPU to the four
            # NVSwitch chips (5/4/4/5), the same PCIe switches and NDR400 ConnectX-7 NICs
            nvlinks=_to_switches(8, (5, 4, 4, 5)),
            nvswitch_count=4,
            gpu_pcie_switch=(0, 0, 1, 1, 2, 2, 3, 3),
            pcie_switch_socket=(0, 0, 1, 1),
            nics=_nics(8, "MT4129", "MT_0000000838", "28.39.1002", NDR, per_switch=2),
            system_power_watts=10200,  # ~ DGX H200, the DGX H100 chassis
            driver_version="570.124.06",
            cuda_driver_version=12080,
        ),
        Profile(
            name="geforce-workstation",
            description="Workstation: 2x GTX 1080 Ti + 2x RTX 2080 Ti (the 2080 Ti pair on a "
            "2-link NVLink bridge), no ECC, fans, no InfiniBand",
            gpus=(GTX_1080_TI, GTX_1080_TI, RTX_2080_TI, RTX_2080_TI),
            nvlinks=((), (), (LinkEnd("gpu", 3),) * 2, (LinkEnd("gpu", 2),) * 2),
            nvswitch_count=0,
            gpu_pcie_switch=(None, None, None, None),
            pcie_switch_socket=(),
            gpu_socket_without_switch=(0, 0, 0, 0),
            nics=(),
            system_power_watts=1200,
            driver_version="550.144.03",
            cuda_driver_version=12040,
        ),
        Profile(
            name="inference-t4",
            description="Inference server: 4x T4 16 GB, one 25GbE RoCE port",
            gpus=(T4,) * 4,
            nvlinks=((), (), (), ()),
            nvswitch_count=0,
            gpu_pcie_switch=(0, 0, 1, 1),
            pcie_switch_socket=(0, 1),
            nics=_nics(
                1,
                "MT4119",
                "MT_0000000080",
                "16.35.2000",
                "25 Gb/sec (1X EDR)",
                per_switch=1,
                link_layer="Ethernet",
            ),
            system_power_watts=600,
            driver_version="550.144.03",
            cuda_driver_version=12040,
        ),
    )
}


class UnknownProfile(ValueError):
    pass


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(PROFILES)
        raise UnknownProfile(f"unknown hardware profile {name!r} (known: {known})") from None
