"""The stored form of a job summary: NVW1: + base32(LZMA(JSON)), within 4 KB for a
64-GPU job, read back after sacctmgr lowercased it, refusing jobstats' JS1: and anything
else that is not ours."""

from __future__ import annotations

import base64
import lzma
import random
import zlib

import pytest

from nvwatch.report.jobs.codec import LIMIT_BYTES, StoreError, decode, encode, encode_within
from nvwatch.report.jobs.model import (
    GPU_SHARE,
    GpuUse,
    JobSummary,
    NodeShare,
    Note,
    PortUse,
    totals,
)


def _summary(nodes: int, gpus_per_node: int = 8, seed: int = 1) -> JobSummary:
    """A job with every field filled with varied figures, as a real one has."""
    rng = random.Random(seed)
    gpus = tuple(
        GpuUse(
            instance=f"dgx-{n:03d}",
            gpu=str(g),
            model="NVIDIA H100 80GB HBM3",
            utilization=rng.uniform(0, 1),
            sm_active=rng.uniform(0, 1),
            tensor_active=rng.uniform(0, 1),
            memory_peak_bytes=rng.uniform(1e9, 8.5e10),
            memory_total_bytes=85899345920.0,
            power_mean_watts=rng.uniform(80, 700),
            power_limit_watts=700.0,
            energy_joules=rng.uniform(1e5, 1e8),
            nvlink_bytes=rng.uniform(1e9, 1e14),
            clock_events={"sw_power_cap": rng.uniform(0, 1), "sw_thermal_slowdown": rng.random()},
        )
        for n in range(nodes)
        for g in range(gpus_per_node)
    )
    ports = tuple(
        PortUse(f"dgx-{n:03d}", f"mlx5_{p}", "1", rng.uniform(1e9, 1e13), rng.uniform(1e9, 1e13))
        for n in range(nodes)
        for p in range(8)
    )
    shares = tuple(
        NodeShare(f"dgx-{n:03d}", 8, 8, GPU_SHARE, rng.uniform(1e6, 1e9)) for n in range(nodes)
    )
    notes = (Note("idle-gpus", "did not use 3 of its 64 GPUs", "below 5%", 3.5),)
    return JobSummary(
        "4711", "c1", "alice", "ml", 1.7e9, 1.7e9 + 86400.5, gpus, ports, shares, notes,
        **totals(gpus),
    )  # fmt: skip


def test_a_summary_comes_back_as_it_was_stored() -> None:
    stored = _summary(2).to_dict()
    assert decode(encode(stored)) == stored
    assert JobSummary.from_dict(decode(encode(stored))).to_dict() == stored


def test_a_summary_lowercased_by_sacctmgr_still_reads() -> None:
    stored = _summary(1).to_dict()
    assert decode(encode(stored).lower()) == stored


def test_a_64_gpu_job_fits_the_admin_comment_budget() -> None:
    text = encode_within(_summary(8).to_dict())
    assert text.startswith("NVW1:") and len(text) <= LIMIT_BYTES
    back = decode(text)
    # whole: every GPU's and port's row, with figures as varied as a job's can be
    assert not back["truncated"] and len(back["gpus"]) == 64 and len(back["ports"]) == 64
    assert back == _summary(8).to_dict()


def test_a_summary_too_large_drops_its_rows_and_keeps_its_totals() -> None:
    whole = _summary(64).to_dict()  # 512 GPUs
    assert len(encode(whole)) > LIMIT_BYTES
    kept = JobSummary.from_dict(decode(encode_within(whole)))
    assert kept.truncated and kept.gpus == () and kept.ports == ()
    assert kept.gpu_count == 512
    assert kept.utilization == whole["utilization"]
    assert kept.gpu_energy_joules == whole["gpu_energy_joules"]
    assert [n.code for n in kept.notes] == ["idle-gpus"]


def _raw_lzma(data: bytes) -> bytes:
    filters = [{"id": lzma.FILTER_LZMA2, "dict_size": 1 << 16}]
    return lzma.compress(data, format=lzma.FORMAT_RAW, filters=filters)


@pytest.mark.parametrize("prefix", ["JS1:", "js1:"])
def test_jobstats_text_is_named_and_not_read(prefix: str) -> None:
    jobstats = prefix + base64.b64encode(zlib.compress(b'{"gpus": 1}')).decode()
    with pytest.raises(StoreError, match=r"written by jobstats \(JS1:\), not by nvwatch"):
        decode(jobstats)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("queued by the admin: reservation 7", "not an nvwatch summary"),
        ("NVW1:%%%not-base64%%%", "corrupt"),
        ("NVW1:" + base64.b32encode(b"not lzma").decode(), "corrupt"),
        ("NVW1:" + base64.b32encode(_raw_lzma(b"[1, 2]")).decode(), "not an object"),
    ],
)
def test_anything_else_is_one_clear_error(text: str, words: str) -> None:
    with pytest.raises(StoreError, match=words) as caught:
        decode(text)
    assert "\n" not in str(caught.value)
