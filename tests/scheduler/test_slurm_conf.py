"""No Slurm configuration, no Slurm command: not one process is started.

Without a slurm.conf a real client falls back to configless mode and asks DNS for its
controller. The `squeue`, `sinfo` and `sshare` here append their name and the SLURM_CONF
they got to a file, so each test counts what ran. The standard locations are injected
(paths in tmp_path), never this machine's /etc; `doctor --simulate` searches none.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from nvwatch.agent.sources import SourceUnavailable
from nvwatch.agent.sources.scheduler.fairshare import FIELDS
from nvwatch.agent.sources.scheduler.slurm_commands import SlurmClient
from nvwatch.agent.sources.scheduler.source import SchedulerSource
from tests.scheduler.test_failures import NVWATCH

LOOPBACK_CONF = "ClusterName=test\nSlurmctldHost=localhost(127.0.0.1)\n"
EMPTY = '{"meta": {}, "errors": [], "%s": []}'


def _counting(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """PATH of squeue, sinfo and sshare that log each run; no SLURM_CONF."""
    bin_dir, runs = tmp_path / "bin", tmp_path / "runs"
    bin_dir.mkdir()
    # sshare's header and no row: a cluster without accounting
    printed = {"squeue": EMPTY % "jobs", "sinfo": EMPTY % "nodes", "sshare": "|".join(FIELDS)}
    for name, text in printed.items():
        script = bin_dir / name
        script.write_text(f"#!/bin/sh\necho \"{name} $SLURM_CONF\" >> {runs}\necho '{text}'\n")
        script.chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "SLURM_CONF"}
    return {**env, "PATH": str(bin_dir)}, runs


def _ran(runs: Path) -> list[str]:
    return runs.read_text().splitlines() if runs.exists() else []


def _source(env: dict[str, str], client: SlurmClient) -> SchedulerSource:
    return SchedulerSource(interval=3600, timeout=5, max_accounts=5, env=env, client=client)


def _down(source: SchedulerSource) -> str:
    try:
        assert source.refresh() is None
        with pytest.raises(SourceUnavailable) as down:
            source.collect()
    finally:
        source.close()
    return str(down.value)


def test_no_configuration_anywhere_runs_nothing(tmp_path: Path) -> None:
    env, runs = _counting(tmp_path)
    standard = (tmp_path / "etc/slurm.conf", tmp_path / "run/slurm.conf")
    client = SlurmClient(conf_paths=standard)
    reason = _down(
        SchedulerSource(interval=3600, timeout=5, max_accounts=5, env=env, client=client)
    )
    assert _ran(runs) == []
    assert reason == (
        f"no Slurm configuration: SLURM_CONF is not set and {standard[0]} or {standard[1]} "
        "is not readable; set SLURM_CONF to the cluster's slurm.conf (no Slurm command was run)"
    )


def test_slurm_conf_naming_no_file_runs_nothing(tmp_path: Path) -> None:
    env, runs = _counting(tmp_path)
    env["SLURM_CONF"] = str(tmp_path / "absent.conf")
    present = tmp_path / "slurm.conf"  # a standard location that does exist: not used
    present.write_text(LOOPBACK_CONF)
    client = SlurmClient(conf_paths=(present,))
    reason = _down(
        SchedulerSource(interval=3600, timeout=5, max_accounts=5, env=env, client=client)
    )
    assert _ran(runs) == []
    assert reason.startswith(f"SLURM_CONF names {tmp_path / 'absent.conf'}, which is not")


def test_a_standard_location_is_used_and_named_to_the_command(tmp_path: Path) -> None:
    env, runs = _counting(tmp_path)
    conf = tmp_path / "run/slurm/conf/slurm.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(LOOPBACK_CONF)
    client = SlurmClient(conf_paths=(tmp_path / "etc/slurm.conf", conf))
    source = _source(env, client)
    try:
        assert source.refresh() is not None
    finally:
        source.close()
    assert _ran(runs) == [f"squeue {conf}", f"sinfo {conf}"]


def _doctor(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [NVWATCH, "doctor", "--sources", "scheduler", "--simulate", "dgx-h100", *args],
        env={k: v for k, v in env.items() if not k.startswith("NVWATCH_")},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_doctor_simulated_runs_no_slurm_command_without_slurm_conf(tmp_path: Path) -> None:
    env, runs = _counting(tmp_path)
    done = _doctor(env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert _ran(runs) == []
    lines = {line.split()[0]: line for line in done.stdout.splitlines()}
    assert lines["scheduler"].split()[1] == "down"
    assert "no Slurm configuration: SLURM_CONF is not set" in lines["scheduler"]
    assert "with --simulate only SLURM_CONF is read" in lines["scheduler"]
    assert lines["slurm"].split()[1] == "none"
    assert "Traceback" not in done.stderr


def test_doctor_names_the_real_commands_and_their_slurm_conf(tmp_path: Path) -> None:
    env, runs = _counting(tmp_path)
    conf = tmp_path / "slurm.conf"
    conf.write_text(LOOPBACK_CONF)
    env["SLURM_CONF"] = str(conf)
    text = _doctor(env)
    assert text.returncode == 0, text.stdout + text.stderr
    slurm = next(line for line in text.stdout.splitlines() if line.startswith("slurm "))
    assert "the real Slurm" in slurm
    assert "squeue --json, sinfo --json, sshare --all --parsable2 " in slurm
    assert slurm.endswith(f"with SLURM_CONF={conf}")
    report = json.loads(_doctor(env, "--format", "json").stdout)
    assert report["slurm"]["commands"][:2] == [["squeue", "--json"], ["sinfo", "--json"]]
    assert report["slurm"]["commands"][2][0] == "sshare"
    assert report["slurm"]["slurm_conf"] == str(conf)
    assert report["slurm"]["real_slurm"] is True
    assert {line.split()[0] for line in _ran(runs)} == {"squeue", "sinfo", "sshare"}
    assert {line.split()[1] for line in _ran(runs)} == {str(conf)}
