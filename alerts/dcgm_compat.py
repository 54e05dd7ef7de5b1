"""dcgm-exporter's fields and labels, and the nvwatch series that give the same values.

One table feeds two outputs, so they cannot disagree:
- docs/migrating-from-dcgm-exporter.md (alerts/dcgm_doc.py), the table a person reads;
- the optional compatibility recording rules (alerts/generated/dcgm-compat.rules.yml)
  that write `DCGM_FI_*` series in dcgm-exporter's units and with its label names, so
  its dashboards and alerts keep working while a fleet moves to nvwatch.

The fields are those of dcgm-exporter's etc/default-counters.csv (`default=True`) and
the commonly enabled opt-in ones (commented out there). Units are dcgm-exporter's: MHz,
MiB, percent 0-100, mJ, ns; nvwatch's are base units (hertz, bytes, ratios 0-1, joules,
seconds), so most rows carry a scale.
"""

from __future__ import annotations

from dataclasses import dataclass

from nvwatch.agent.catalogue import BY_NAME
from nvwatch.mixin.config import MixinConfig

MIB = 1024 * 1024


@dataclass(frozen=True)
class DcgmField:
    """One dcgm-exporter series and where nvwatch has its value.

    `metric` + `select` pick the nvwatch series (added up per GPU: dcgm's NVLink totals
    are over all links) and `scale` turns their unit into dcgm's. An empty
    `metric` means nvwatch has no equivalent; `note` then says so and what to use. A
    non-empty `approximate` says how the value differs from dcgm's.
    """

    name: str
    unit: str
    default: bool
    help: str
    metric: str = ""
    select: tuple[str, ...] = ()
    scale: float = 1.0
    minus: tuple[str, ...] = ()  # nvwatch metrics subtracted (FB_RESERVED: total - used - free)
    approximate: str = ""
    note: str = ""

    @property
    def has_equivalent(self) -> bool:
        return bool(self.metric)


_HOPPER = "nvwatch reads it from GPM, on Hopper and newer only (dcgm: Volta and newer)"
_NO_PIPE = "nvwatch does not read per-precision pipe activity (GPM has it; not exported)"
_VIOLATION = "time clocks were held below target by {}, in ns"

_f = DcgmField
FIELDS: tuple[DcgmField, ...] = (
    # clocks
    _f("DCGM_FI_DEV_SM_CLOCK", "MHz", True, "SM clock", "nvwatch_gpu_clock_hertz",
       select=('clock="sm"',), scale=1e-6),
    _f("DCGM_FI_DEV_MEM_CLOCK", "MHz", True, "memory clock", "nvwatch_gpu_clock_hertz",
       select=('clock="memory"',), scale=1e-6),
    # temperature
    _f("DCGM_FI_DEV_MEMORY_TEMP", "°C", True, "HBM temperature",
       "nvwatch_gpu_temperature_celsius", select=('sensor="memory"',)),
    _f("DCGM_FI_DEV_GPU_TEMP", "°C", True, "GPU die temperature",
       "nvwatch_gpu_temperature_celsius", select=('sensor="gpu"',)),
    # power
    _f("DCGM_FI_DEV_POWER_USAGE", "W", True, "board power draw", "nvwatch_gpu_power_watts"),
    _f("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "mJ", True, "energy since the driver loaded",
       "nvwatch_gpu_energy_joules_total", scale=1e3),
    _f("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "W", False, "power limit enforced now",
       "nvwatch_gpu_power_limit_watts"),
    # PCIe
    _f("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "count", True, "PCIe replays",
       "nvwatch_gpu_pcie_replays_total"),
    _f("DCGM_FI_PROF_PCIE_TX_BYTES", "B/s", True, "PCIe transmit rate",
       "nvwatch_gpu_pcie_throughput_bytes_per_second", select=('direction="tx"',),
       approximate="NVML's 20 ms throughput sample, where dcgm averages its profiling "
       "counters over its sampling interval: the same quantity, noisier"),
    _f("DCGM_FI_PROF_PCIE_RX_BYTES", "B/s", True, "PCIe receive rate",
       "nvwatch_gpu_pcie_throughput_bytes_per_second", select=('direction="rx"',),
       approximate="as DCGM_FI_PROF_PCIE_TX_BYTES"),
    _f("DCGM_FI_DEV_PCIE_TX_THROUGHPUT", "KB", False, "PCIe bytes sent (dcgm-exporter 2.x default)",
       note="no cumulative PCIe byte counter in nvwatch: use the rate "
       '`nvwatch_gpu_pcie_throughput_bytes_per_second{direction="tx"}` (bytes/s)'),
    _f("DCGM_FI_DEV_PCIE_RX_THROUGHPUT", "KB", False, "PCIe bytes received (2.x default)",
       note='as above, with `direction="rx"`'),
    # utilization
    _f("DCGM_FI_DEV_GPU_UTIL", "%", True, "GPU utilization", "nvwatch_gpu_utilization_ratio",
       scale=100.0),
    _f("DCGM_FI_DEV_MEM_COPY_UTIL", "%", True, "memory (copy) utilization",
       "nvwatch_gpu_memory_utilization_ratio", scale=100.0),
    _f("DCGM_FI_DEV_ENC_UTIL", "%", True, "video encoder utilization",
       note="no equivalent: nvwatch does not read the NVENC/NVDEC engines"),
    _f("DCGM_FI_DEV_DEC_UTIL", "%", True, "video decoder utilization",
       note="no equivalent: nvwatch does not read the NVENC/NVDEC engines"),
    _f("DCGM_FI_DEV_FAN_SPEED", "%", False, "fan speed", "nvwatch_gpu_fan_speed_ratio",
       scale=100.0),
    # errors and violations
    _f("DCGM_FI_DEV_XID_ERRORS", "code", True, "value of the last XID",
       note="no equivalent series: PromQL cannot turn the XID code (a label in nvwatch) "
       "into a value. nvwatch counts XIDs per code: "
       "`increase(nvwatch_gpu_xid_errors_total[5m]) > 0`, the code in label `xid`"),
    _f("DCGM_FI_DEV_POWER_VIOLATION", "ns", False, _VIOLATION.format("power"),
       "nvwatch_gpu_throttle_seconds_total", select=('reason="power"',), scale=1e9),
    _f("DCGM_FI_DEV_THERMAL_VIOLATION", "ns", False, _VIOLATION.format("temperature"),
       "nvwatch_gpu_throttle_seconds_total", select=('reason="thermal"',), scale=1e9),
    _f("DCGM_FI_DEV_SYNC_BOOST_VIOLATION", "ns", False, _VIOLATION.format("sync boost"),
       "nvwatch_gpu_throttle_seconds_total", select=('reason="sync_boost"',), scale=1e9),
    _f("DCGM_FI_DEV_BOARD_LIMIT_VIOLATION", "ns", False, _VIOLATION.format("board limits"),
       "nvwatch_gpu_throttle_seconds_total", select=('reason="board_limit"',), scale=1e9),
    _f("DCGM_FI_DEV_LOW_UTIL_VIOLATION", "ns", False, _VIOLATION.format("low utilization"),
       "nvwatch_gpu_throttle_seconds_total", select=('reason="low_utilization"',), scale=1e9),
    _f("DCGM_FI_DEV_RELIABILITY_VIOLATION", "ns", False, _VIOLATION.format("reliability"),
       "nvwatch_gpu_throttle_seconds_total", select=('reason="reliability"',), scale=1e9),
    # memory
    _f("DCGM_FI_DEV_FB_FREE", "MiB", True, "framebuffer memory free",
       "nvwatch_gpu_memory_free_bytes", scale=1 / MIB),
    _f("DCGM_FI_DEV_FB_USED", "MiB", True, "framebuffer memory used",
       "nvwatch_gpu_memory_used_bytes", scale=1 / MIB),
    _f("DCGM_FI_DEV_FB_RESERVED", "MiB", True, "framebuffer memory reserved by the driver",
       "nvwatch_gpu_memory_total_bytes",
       minus=("nvwatch_gpu_memory_used_bytes", "nvwatch_gpu_memory_free_bytes"),
       scale=1 / MIB,
       approximate="total - used - free: exact where the driver has nvmlDeviceGetMemoryInfo_v2 "
       "(R510+); 0 on older drivers, whose `used` includes the reserved memory"),
    # ECC
    _f("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "count", False, "single-bit ECC errors since driver load",
       "nvwatch_gpu_ecc_errors_total", select=('type="corrected"', 'scope="volatile"')),
    _f("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "count", False, "double-bit ECC errors since driver load",
       "nvwatch_gpu_ecc_errors_total", select=('type="uncorrected"', 'scope="volatile"')),
    _f("DCGM_FI_DEV_ECC_SBE_AGG_TOTAL", "count", False, "single-bit ECC errors, board lifetime",
       "nvwatch_gpu_ecc_errors_total", select=('type="corrected"', 'scope="aggregate"')),
    _f("DCGM_FI_DEV_ECC_DBE_AGG_TOTAL", "count", False, "double-bit ECC errors, board lifetime",
       "nvwatch_gpu_ecc_errors_total", select=('type="uncorrected"', 'scope="aggregate"')),
    # retired pages
    _f("DCGM_FI_DEV_RETIRED_SBE", "pages", False, "pages retired for single-bit errors",
       "nvwatch_gpu_retired_pages", select=('cause="sbe"',)),
    _f("DCGM_FI_DEV_RETIRED_DBE", "pages", False, "pages retired for double-bit errors",
       "nvwatch_gpu_retired_pages", select=('cause="dbe"',)),
    _f("DCGM_FI_DEV_RETIRED_PENDING", "pages", False, "pages pending retirement",
       "nvwatch_gpu_retired_pages_pending",
       approximate="NVML reports only whether pages are pending (1/0), which is what both "
       "dcgm and nvwatch export"),
    # NVLink: dcgm's totals are over all links of the GPU
    _f("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL", "count", False, "NVLink flow CRC errors",
       "nvwatch_nvlink_errors_total", select=('type="crc_flit"',)),
    _f("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "count", False, "NVLink data CRC errors",
       "nvwatch_nvlink_errors_total", select=('type="crc_data"',)),
    _f("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "count", False, "NVLink replays",
       "nvwatch_nvlink_errors_total", select=('type="replay"',)),
    _f("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL", "count", False, "NVLink recoveries",
       "nvwatch_nvlink_errors_total", select=('type="recovery"',)),
    _f("DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "counter", True, "NVLink traffic, all links",
       note="no equivalent series: dcgm's unit for this counter depends on the DCGM "
       "version and GPU. nvwatch counts data bytes per link: "
       "`sum without (link) (rate(nvwatch_nvlink_transmit_bytes_total[5m]) + "
       "rate(nvwatch_nvlink_receive_bytes_total[5m]))` is the GPU's NVLink bytes/s"),
    # remapped rows
    _f("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "rows", True, "rows remapped, uncorrectable",
       "nvwatch_gpu_remapped_rows", select=('kind="uncorrectable"',)),
    _f("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "rows", True, "rows remapped, correctable",
       "nvwatch_gpu_remapped_rows", select=('kind="correctable"',)),
    _f("DCGM_FI_DEV_ROW_REMAP_FAILURE", "1/0", True, "row remapping failed",
       "nvwatch_gpu_remapped_rows", select=('kind="failure"',)),
    # vGPU
    _f("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "state", True, "vGPU license status",
       note="no equivalent: nvwatch does not monitor vGPU"),
    # datacenter profiling (DCP)
    _f("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "ratio", True, "graphics engine active",
       "nvwatch_gpu_utilization_ratio",
       approximate="NVML's utilization.gpu (time any kernel ran, sampled by the driver); "
       "dcgm's profiling counter measures the same engine more finely"),
    _f("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "ratio", True, "tensor pipe active",
       "nvwatch_gpu_tensor_active_ratio", note=_HOPPER),
    _f("DCGM_FI_PROF_DRAM_ACTIVE", "ratio", True, "device memory interface active",
       "nvwatch_gpu_dram_active_ratio", note=_HOPPER),
    _f("DCGM_FI_PROF_SM_ACTIVE", "ratio", False, "SMs with at least one warp",
       "nvwatch_gpu_sm_active_ratio", note=_HOPPER),
    _f("DCGM_FI_PROF_SM_OCCUPANCY", "ratio", False, "resident warps per SM maximum",
       "nvwatch_gpu_sm_occupancy_ratio", note=_HOPPER),
    _f("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "ratio", False, "FP64 pipe active", note=_NO_PIPE),
    _f("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "ratio", False, "FP32 pipe active", note=_NO_PIPE),
    _f("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "ratio", False, "FP16 pipe active", note=_NO_PIPE),
)  # fmt: skip


# dcgm-exporter's Kubernetes labels come from the kubelet's pod-resources API, and so do
# nvwatch's with `--attribution kubernetes`: on the allocation series (one per GPU and
# owner, `scheduler` naming the mode), joined at query time instead of on every series.
ALLOCATION = "nvwatch_gpu_allocation_info"
KUBERNETES = "kubernetes"  # the --attribution mode, and the allocation's `scheduler`


@dataclass(frozen=True)
class DcgmLabel:
    """A label on dcgm-exporter's series and where the compatibility rules take it from."""

    name: str
    meaning: str
    nvwatch: str  # "" = nvwatch has no such label
    regex: str = "(.*)"  # label_replace regex over the nvwatch label ("" = same name)
    replacement: str = "$1"
    # on the compatibility series (they are per GPU; MIG labels are per MIG device)
    per_gpu: bool = True
    # the nvwatch series carrying it when it is not on the GPU's own series (joined at
    # query time), and the --attribution mode that fills it
    series: str = ""
    attribution: str = ""


def labels(cfg: MixinConfig) -> tuple[DcgmLabel, ...]:
    """dcgm-exporter's labels; those with an nvwatch source are on every compatibility series."""
    return (
        DcgmLabel("gpu", "NVML index of the GPU", "gpu", regex=""),  # same name, same value
        DcgmLabel("UUID", "GPU UUID", "uuid"),
        DcgmLabel("pci_bus_id", "PCI address of the GPU", "pci_bus_id", regex=""),
        DcgmLabel("device", "device node, nvidiaN", "gpu", replacement="nvidia$1"),
        DcgmLabel("modelName", "product name", "name"),
        # the scrape address without its port ([::1]:9477 -> [::1])
        DcgmLabel("Hostname", "the node's host name", cfg.instance_label, regex="(.*?)(:[0-9]+)?"),
        DcgmLabel("DCGM_FI_DRIVER_VERSION", "driver version", "driver_version"),
        *(
            DcgmLabel(name, meaning, name, per_gpu=False, series=ALLOCATION, attribution=KUBERNETES)
            for name, meaning in (
                ("pod", "Kubernetes pod using the GPU"),
                ("namespace", "that pod's namespace"),
                ("container", "that pod's container"),
            )
        ),
        DcgmLabel("GPU_I_ID", "MIG GPU instance id", "gpu_instance_id", per_gpu=False),
        DcgmLabel("GPU_I_PROFILE", "MIG GPU instance profile", "profile", per_gpu=False),
        DcgmLabel("err_code, err_msg", "XID code and text (DCGM_FI_DEV_XID_ERRORS)", ""),
    )


# The recording rule carrying dcgm-exporter's labels for each GPU, joined onto each value.
LABELS_RULE = "gpu:nvwatch_gpu_info:dcgm_labels"


def _on_compat(cfg: MixinConfig) -> tuple[DcgmLabel, ...]:
    return tuple(lb for lb in labels(cfg) if lb.nvwatch and lb.per_gpu and not lb.series)


def pod_labels(cfg: MixinConfig) -> tuple[str, ...]:
    """dcgm-exporter's Kubernetes labels, which nvwatch's allocation series carries."""
    return tuple(lb.name for lb in labels(cfg) if lb.series == ALLOCATION)


def allocation_on(cfg: MixinConfig) -> str:
    """The labels a per-GPU value and the allocation series are joined on."""
    return f"{cfg.cluster_label}, {cfg.instance_label}, gpu"


def per_pod_expr(cfg: MixinConfig, field: DcgmField) -> str:
    """The field's value per pod, as dcgm-exporter's Kubernetes mode labels it: the
    allocation on the many side (pods sharing a GPU each get its value), its labels kept."""
    allocation = ALLOCATION + cfg.sel(f'scheduler="{KUBERNETES}"')
    return (
        f"{allocation}\n  * on ({allocation_on(cfg)}) group_left ()\n  ({value_expr(cfg, field)})"
    )


def _renamed(cfg: MixinConfig) -> tuple[DcgmLabel, ...]:
    return tuple(lb for lb in _on_compat(cfg) if lb.regex)


def joined_labels(cfg: MixinConfig) -> tuple[str, ...]:
    """dcgm label names the compatibility series carry beyond the value's own labels."""
    return tuple(lb.name for lb in _on_compat(cfg) if lb.name != "gpu")


def labels_expr(cfg: MixinConfig) -> str:
    """nvwatch_gpu_info with dcgm-exporter's label names (the nvwatch-only ones dropped)."""
    expr = "nvwatch_gpu_info" + cfg.sel()
    for lb in _renamed(cfg):
        expr = (
            f'label_replace({expr}, "{lb.name}", "{lb.replacement}", "{lb.nvwatch}", "{lb.regex}")'
        )
    dropped = [n for n in BY_NAME["nvwatch_gpu_info"].labels if n not in ("gpu", "pci_bus_id")]
    return f"max without ({', '.join(dropped)}) ({expr})"


def _per_gpu(metric: str, selector: str) -> str:
    """The metric's series of one GPU added up (NVLink links), without the nvwatch labels
    dcgm does not have (uuid, and the selected or summed-over ones)."""
    extra = [n for n in BY_NAME[metric].labels if n != "gpu"]
    return f"sum without ({', '.join(extra)}) ({metric}{selector})"


def _number(value: float) -> str:
    return f"{value:.12g}"


def value_expr(cfg: MixinConfig, field: DcgmField) -> str:
    """PromQL giving the field's value, in dcgm's unit, from nvwatch series (one per GPU)."""
    expr = _per_gpu(field.metric, cfg.sel(*field.select))
    if field.minus:
        expr = "(" + " - ".join([expr, *(_per_gpu(m, cfg.sel()) for m in field.minus)]) + ")"
    if field.scale != 1.0:
        expr = f"{expr} {'/' if field.scale < 1 else '*'} {_number(_scale_operand(field.scale))}"
    return expr


def _scale_operand(scale: float) -> float:
    """Divide by 1e6 rather than multiply by 1e-06: exact in floating point."""
    return 1 / scale if scale < 1 else scale


def compat_rules(cfg: MixinConfig) -> dict[str, object]:
    """The optional rule file: DCGM_FI_* series with dcgm-exporter's units and labels."""
    on = f"{cfg.cluster_label}, {cfg.instance_label}, gpu"
    join = f"on ({on}) group_left ({', '.join(joined_labels(cfg))}) {LABELS_RULE}"
    rules: list[dict[str, str]] = [{"record": LABELS_RULE, "expr": labels_expr(cfg)}]
    rules += [
        {"record": f.name, "expr": f"{value_expr(cfg, f)}\n* {join}"}
        for f in FIELDS
        if f.has_equivalent
    ]
    return {
        "groups": [
            {
                "name": "nvwatch-dcgm-compat.rules",
                "interval": cfg.evaluation_interval,
                "rules": rules,
            }
        ]
    }
