"""The NVLink assumptions of docs/hardware-notes.md: field 164's unit against nvidia-smi,
the throughput and error counters, and how many links each GPU answers for."""

from __future__ import annotations

from typing import Any

import pynvml

from benchmarks.real_gpu import smi
from benchmarks.real_gpu.evidence import Evidence, value
from benchmarks.real_gpu.finding import CONFIRMED, INCONCLUSIVE, ONE_GPU, WRONG, Finding, ratio_of

# --- NVLink ----------------------------------------------------------------------------


def _links(ev: Evidence) -> list[dict[str, Any]]:
    gpu = ev.gpu("idle") or {}
    return list((gpu.get("nvlink") or {}).get("links") or [])


def _field(link: dict[str, Any], field_id: int) -> dict[str, Any] | None:
    return next((e for e in link.get("fields", []) if e.get("field") == field_id), None)


def _active(links: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [link for link in links if value(link.get("state")) == pynvml.NVML_FEATURE_ENABLED]


def nvlink_speed(ev: Evidence, f: Finding) -> None:
    f.raw = ["readings-idle.json", "nvidia-smi-nvlink-s.txt"]
    links = _links(ev)
    active = _active(links)
    if not active:
        f.verdict = ONE_GPU
        f.measured = f"{len(links)} links answer, none active" if links else "no NVLink link"
        f.note = "the speed field is checked against nvidia-smi on an active link only"
        return
    speeds = {}
    for link in active:
        entry = _field(link, pynvml.NVML_FI_DEV_NVLINK_GET_SPEED)
        if entry and entry.get("value") is not None:
            speeds[link["link"]] = float(entry["value"])
    if not speeds:
        f.verdict = WRONG
        f.measured = "NVML_FI_DEV_NVLINK_GET_SPEED answers nothing on active links"
        f.note = "the agent falls back to the version's nominal rate"
        return
    f.measured = "field 164 per active link: " + _spread(speeds.values())
    smi_text = ev.text("nvidia-smi-nvlink-s.txt")
    reference: dict[int, float] = {}
    if smi_text:
        shown = smi.nvlink_speeds(smi_text).get(0, {})
        reference = {link: gbs * 1e9 for link, gbs in shown.items() if gbs is not None}
        f.measured += "; nvidia-smi nvlink -s: " + _spread(v / 1e9 for v in reference.values())
        f.measured += " GB/s"
    else:
        profile = ev.profile()
        if profile is None:
            f.verdict = INCONCLUSIVE
            f.note = "no nvidia-smi and no profile to compare with"
            return
        per_link = profile.gpus[0].nvlink_bytes_per_second
        reference = {link: per_link for link in speeds}
        f.note = (
            f"compared with the {profile.name} profile's {per_link / 1e9:g} GB/s (no nvidia-smi)"
        )
    ratios = [ratio_of(speeds[link] * 1e6, reference[link]) for link in speeds if link in reference]
    if not ratios:
        f.verdict = INCONCLUSIVE
        return
    f.measured += f"; field x 1e6 / reference = {_spread(ratios, '.3f')}"
    # 2%: MiB/s read as MB/s would be 4.9% off
    f.verdict = CONFIRMED if all(abs(r - 1) <= 0.02 for r in ratios) else WRONG


def _spread(values: Any, spec: str = ",.0f") -> str:
    items = sorted(set(values))
    if not items:
        return "none"
    if len(items) == 1:
        return format(items[0], spec)
    return f"{format(items[0], spec)} .. {format(items[-1], spec)}"


def nvlink_throughput(ev: Evidence, f: Finding) -> None:
    f.raw = ["readings-idle.json", "readings-load.json"]
    links = _links(ev)
    active = _active(links)
    counters = []
    for link in active:
        for field_id in (
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
        ):
            entry = _field(link, field_id)
            if entry and entry.get("value") is not None:
                counters.append(float(entry["value"]))
    f.verdict = ONE_GPU
    if not active:
        f.measured = "no active NVLink link"
    else:
        f.measured = f"{len(active)} active links; data counters {_spread(counters)}"
    f.note = "needs known NVLink traffic between two GPUs (e.g. an all-reduce of known size)"


def nvlink_errors_high_links(ev: Evidence, f: Finding) -> None:
    f.raw = ["readings-idle.json", "nvidia-smi-nvlink-e.txt"]
    links = _links(ev)
    high = [link for link in links if link["link"] >= 12]
    lane_ids_above_11 = [
        name
        for name in dir(pynvml)
        if name.startswith("NVML_FI_DEV_NVLINK_") and name.endswith(("_L12", "_L13", "_L17"))
    ]
    if not high:
        f.verdict = ONE_GPU if len(links) == 0 else INCONCLUSIVE
        f.measured = f"{len(links)} links answer; none numbered 12 or above"
        return
    answered = [
        link
        for link in high
        if all(value(r) is not None for r in (link.get("errors_by_call") or {}).values())
    ]
    f.measured = (
        f"links 12-{high[-1]['link']}: nvmlDeviceGetNvLinkErrorCounter answers on "
        f"{len(answered)} of {len(high)}; pynvml lane field ids above L11: "
        f"{len(lane_ids_above_11)}"
    )
    scoped = []
    for link in answered:
        entry = _field(link, pynvml.NVML_FI_DEV_NVLINK_ERROR_DL_REPLAY)
        by_call = value(link["errors_by_call"].get(str(pynvml.NVML_NVLINK_ERROR_DL_REPLAY)))
        if entry and entry.get("value") is not None:
            scoped.append(entry["value"] == by_call)
    if scoped:
        f.measured += f"; scoped DL_REPLAY field equals the call on {sum(scoped)}/{len(scoped)}"
    if answered and not lane_ids_above_11 and all(scoped):
        f.verdict = CONFIRMED
    elif not answered:
        f.verdict = ONE_GPU if not _active(links) else WRONG
        f.note = "the per-link call does not answer above link 11"
    else:
        f.verdict = WRONG


def link_count(ev: Evidence, f: Finding) -> None:
    f.raw = ["readings-idle.json", "nvidia-smi-nvlink-s.txt"]
    links, profile = _links(ev), ev.profile()
    active = _active(links)
    f.measured = f"{len(links)} links answer, {len(active)} active"
    if profile is None:
        f.verdict = INCONCLUSIVE
        return
    want = len(profile.nvlinks[0])
    f.measured += f" (profile {profile.name}: {want})"
    if len(links) == want:
        f.verdict = CONFIRMED
    elif not active:
        f.verdict = ONE_GPU
        f.note = "no active link: this GPU's NVLink is not wired to peers here"
    else:
        f.verdict = WRONG
