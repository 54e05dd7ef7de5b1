"""The BMC read benchmark's section of docs/performance.md, written from one run."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from benchmarks.bmc_read import BmcReadCost, PeerCost, Timing

BEGIN, END = "<!-- bmc-read:begin -->", "<!-- bmc-read:end -->"


def read_section(cost: BmcReadCost, command: str) -> str:
    how = (
        f"`{command}`, {cost.date}, on {cost.machine} with {cost.cores} cores, a machine "
        f"shared with other work (load average {cost.load} at the start), python-ipmi "
        f"{cost.python_ipmi}. One real BMC (OpenIPMI `ipmi_sim` on loopback, the tests' BMC "
        f"of {cost.sensors} sensors, with DCMI power from the tests' plug-in) read by "
        "`IpmiReader` as a probe reads it, "
        "scrape after scrape: the first read walks the SDR and keeps its records, the "
        "others check the repository's stamp and read the sensors. CPU is the reading "
        "thread's (python-ipmi's packing, HMAC, AES and parsing); a read opens and closes "
        "its own session."
    )
    rows = [
        _row("one read, SDR records kept (every scrape but the first)", cost.kept_records),
        _row("one read walking the SDR (a fresh reader each time)", cost.walk_every_read),
    ]
    if cost.peer is not None:
        rows.append(_peer_row(cost.peer))
    return "\n".join(
        [
            BEGIN,
            "## One BMC read",
            "",
            _wrap(how),
            "",
            "| | reads | wall, median / p99 / max | CPU, median / p99 |",
            "|---|---|---|---|",
            *rows,
            "",
            _wrap(_after(cost)),
            END,
            "",
        ]
    )


def _row(what: str, timing: Timing) -> str:
    return (
        f"| {what} | {timing.reads} "
        f"| {timing.wall_ms_median:.1f} / {timing.wall_ms_p99:.1f} / {timing.wall_ms_max:.1f} ms "
        f"| {timing.cpu_ms_median:.1f} / {timing.cpu_ms_p99:.1f} ms |"
    )


def _peer_row(peer: PeerCost) -> str:
    return (
        f"| ipmi_exporter's scrape of the same BMC, SDR cache kept | {peer.scrapes} "
        f"| {peer.wall_ms_median:.1f} / {peer.wall_ms_p99:.1f} / {peer.wall_ms_max:.1f} ms "
        f"| {peer.cpu_ms_mean:.1f} ms (mean; the exporter and its FreeIPMI processes) |"
    )


def _after(cost: BmcReadCost) -> str:
    text = (
        f"A BMC that takes datagrams and answers none: the read gave up "
        f"{cost.silent_overrun_ms:.1f} ms after its module's timeout "
        f"({cost.silent_timeout_s:g} s here)."
    )
    if cost.peer is None:
        return text + (
            " ipmi_exporter was not measured: Debian's `prometheus-ipmi-exporter` and "
            "FreeIPMI's `ipmimonitoring` are not both installed here."
        )
    return text + (
        f" The exporter is {cost.peer.version} over {cost.peer.freeipmi}, with the same "
        "module (collectors `ipmi` and `dcmi`, and FreeIPMI's `opensesspriv` workaround, "
        "which ipmi_sim needs), its first scrape (the SDR cache's build) not counted; it "
        "runs FreeIPMI's tools as processes on every scrape."
    )


def _wrap(paragraph: str) -> str:
    return textwrap.fill(paragraph, width=88, break_long_words=False, break_on_hyphens=False)
