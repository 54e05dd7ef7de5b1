"""What a Slurm command prints costs the agent a bounded amount of memory.

A fake `squeue` on PATH prints 400 MB: the command is killed at the cap and the source is
down with one line naming the command, the cap and the flag, while the process's peak RSS
stays under its baseline plus the cap plus a margin. A queue of 100,000 jobs in the
simulator's JSON (sim/queue/slurm_out.py's keys and values) is read whole, at a peak well under
what the document and its dictionaries would cost, and leaves little behind. The memory
figures come from a child process of its own (tests/scheduler/rss_probe.py): its
baseline RSS, its kernel-measured peak (ru_maxrss) and its RSS after the refresh.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.scheduler.test_failures import NVWATCH, _path_with

MIB = 2**20
ROOT = Path(__file__).resolve().parents[2]
CAP_MIB = 64
# what the probe's own reading adds to the cap: one 64 KiB read, the decoder's pieces'
# headers, the error's traceback objects, allocator slack
MARGIN_MIB = 24
JOBS = 100_000
META = {"plugin": {"type": "openapi/v0.0.38", "name": "Slurm OpenAPI v0.0.38"}}
FLOOD = f"exec /usr/bin/head -c {400 * 10**6} /dev/zero"


def _probe(env: dict[str, str], max_output: int | None = None) -> dict[str, Any]:
    argv = [sys.executable, "-m", "tests.scheduler.rss_probe", json.dumps(env)]
    if max_output is not None:
        argv.append(str(max_output))
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    print(result)  # the figures, for -s
    return result


def test_a_flood_is_killed_at_the_cap_in_one_line_and_bounded_memory(tmp_path: Path) -> None:
    result = _probe(_path_with(tmp_path, FLOOD), CAP_MIB * MIB)
    assert result["up"] is False
    assert result["error"] == (
        f"squeue printed more than {CAP_MIB} MiB, the cap; raise --scheduler-max-output-mib "
        "for a queue this large"
    )
    assert result["peak_mib"] < result["baseline_mib"] + CAP_MIB + MARGIN_MIB, result


def test_the_agent_says_so_with_the_flag(tmp_path: Path) -> None:
    done = subprocess.run(
        [NVWATCH, "dump", "--format", "json", "--settle", "0", "--sources", "host,scheduler",
         "--scheduler-max-output-mib", "8"],
        env=_path_with(tmp_path, FLOOD), capture_output=True, text=True, timeout=60,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    scheduler = json.loads(done.stdout)["scheduler"]
    assert scheduler["up"] is False
    assert scheduler["error"].startswith("squeue printed more than 8 MiB, the cap; raise ")


def _job(job_id: int) -> dict[str, Any]:
    """One job as the simulator prints it: every fourth pending, the rest running."""
    running = job_id % 4 != 0
    return {
        "account": f"acct{job_id % 20}",
        "array_task_string": "",
        "job_id": job_id,
        "job_state": "RUNNING" if running else "PENDING",
        "name": f"train-{job_id}",
        "node_count": 1,
        "partition": f"gpu{job_id % 3}",
        "state_reason": "None" if running else "Priority",
        "submit_time": 1_700_000_000 + job_id,
        "tasks": 1,
        "time_limit": 1440,
        "tres_per_job": "",
        "tres_per_node": "gres:gpu:8",
        "tres_per_socket": "",
        "tres_per_task": "",
        "user_name": f"user{job_id % 300}",
        "batch_host": f"dgx{job_id % 1000:04d}" if running else "",
        "eligible_time": 1_700_000_000 + job_id,
        "end_time": 1_800_000_000 if running else 0,
        "gres_detail": ["gpu:8(IDX:0-7)"] if running else [],
        "nodes": f"dgx{job_id % 1000:04d}" if running else "",
        "start_time": 1_700_100_000 if running else 0,
    }


def _queue(tmp_path: Path) -> tuple[dict[str, str], int]:
    """squeue printing JOBS jobs, sinfo a few nodes (the printed files made once each)."""
    squeue = tmp_path / "squeue.json"
    with squeue.open("w") as out:
        document = {"meta": META, "errors": [], "jobs": [_job(i) for i in range(1, JOBS + 1)]}
        json.dump(document, out, indent=2)
    del document
    nodes = [
        {"name": f"dgx{i:04d}", "partitions": ["gpu0"], "gres": "gpu:8", "gres_used": "gpu:8",
         "state": "allocated", "state_flags": [], "reason": ""}
        for i in range(1000)
    ]  # fmt: skip
    (tmp_path / "sinfo.json").write_text(json.dumps({"meta": META, "errors": [], "nodes": nodes}))
    env = _path_with(tmp_path, f"exec /bin/cat {squeue}")
    sinfo = Path(env["PATH"]) / "sinfo"
    sinfo.write_text(f"#!/bin/sh\nexec /bin/cat {tmp_path / 'sinfo.json'}\n")
    sinfo.chmod(0o755)
    return env, os.path.getsize(squeue)


def test_a_queue_of_100k_jobs_is_read_at_a_bounded_peak_and_leaves_little(
    tmp_path: Path,
) -> None:
    env, size = _queue(tmp_path)
    size_mib = size / MIB
    result = _probe(env)
    assert result["up"] is True, result["error"]
    # the text and, while they are joined, its decoded pieces; then the text and 100k
    # small records: the document's dictionaries are never all held (measured: 2.0x the
    # text; json.loads of the whole bytes, dictionaries kept, took 2.9x and more)
    assert result["peak_mib"] - result["baseline_mib"] < 2.2 * size_mib + 16, (size_mib, result)
    # afterwards: the tally's own state, not the queue (measured: 6 MiB of 62 MiB)
    assert result["after_mib"] - result["baseline_mib"] < 0.25 * size_mib, (size_mib, result)


def test_a_cap_out_of_bounds_exits_2_with_one_line(tmp_path: Path) -> None:
    env = {k: v for k, v in _path_with(tmp_path, None).items() if not k.startswith("NVWATCH_")}
    for args, environ in (
        (["--scheduler-max-output-mib", "0"], env),
        ([], {**env, "NVWATCH_SCHEDULER_MAX_OUTPUT_MIB": "5000"}),
    ):
        done = subprocess.run(
            [NVWATCH, "doctor", "--sources", "scheduler", *args],
            env=environ, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert done.returncode == 2, done.stdout + done.stderr
        (line,) = done.stderr.splitlines()
        assert line.startswith("nvwatch: error: ") and "1<=x<=4096" in line, line
