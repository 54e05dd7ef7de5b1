"""The shipped deploy files are the ones docs/deploy.md shows: its `nvwatch doctor` wiring
excerpts, parsed, are in the systemd unit and the DaemonSet as shipped; the unit passes
`systemd-analyze verify`; the DaemonSet, as `kubectl kustomize` renders it, is a valid
Kubernetes object whose readiness probe's doctor checks what the agent serves and which
can read the host's kernel log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import kubernetes_validate
import pytest
import yaml

from nvwatch.agent.cli import cli
from nvwatch.agent.cli.options import DEFAULT_KMSG_PATH
from tests.conftest import require_tool
from tests.deploy.snippets import blocks, unit_entries

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs" / "deploy.md"
UNIT = REPO / "deploy" / "systemd" / "nvwatch.service"
KUSTOMIZE = REPO / "deploy" / "kubernetes"
SLURM = REPO / "deploy" / "slurm"
INSTALLED = "/opt/nvwatch/bin/nvwatch"  # the unit's binary, made by its install lines


def _blocks(info: str) -> list[str]:
    """The doctor section's fenced blocks whose info string is `info` ("" for none)."""
    return blocks(DOCS, "## Health checks with `nvwatch doctor`", info)


def test_the_units_doctor_lines_are_the_documented_ones() -> None:
    [snippet] = _blocks("ini")
    documented = unit_entries(snippet, None)
    assert ("ExecStartPre", f"-{INSTALLED} doctor") in documented
    shipped = unit_entries(UNIT.read_text(encoding="utf-8"), "[Service]")
    for entry in documented:
        assert entry in shipped, f"docs/deploy.md shows {entry}, the unit has no such line"


def _render() -> list[dict[str, Any]]:
    kubectl = require_tool("kubectl")
    done = subprocess.run(
        [kubectl, "kustomize", str(KUSTOMIZE)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


@pytest.fixture(scope="module")
def daemonset() -> dict[str, Any]:
    [found] = [d for d in _render() if d["kind"] == "DaemonSet"]
    return found


def _container(daemonset: dict[str, Any]) -> dict[str, Any]:
    [container] = daemonset["spec"]["template"]["spec"]["containers"]
    return container  # type: ignore[no-any-return]


def test_the_daemonsets_probes_are_the_documented_ones(daemonset: dict[str, Any]) -> None:
    [snippet] = _blocks("yaml")
    documented = yaml.safe_load(snippet)
    assert documented["readinessProbe"]["exec"]["command"][:2] == ["nvwatch", "doctor"]
    assert documented["livenessProbe"]["httpGet"]["path"] == "/livez"
    container = _container(daemonset)
    for field, value in documented.items():
        assert container.get(field) == value, f"{field}: docs/deploy.md and the DaemonSet differ"


def _option_names(command: str) -> set[str]:
    # through the group, as the command line finds it: doctor is loaded when named
    found = cli.get_command(click.Context(cli), command)
    assert found is not None, command
    params = found.params
    return {opt for p in params for opt in p.opts if opt.startswith("--")}


def test_the_readiness_probes_doctor_checks_what_the_agent_serves(
    daemonset: dict[str, Any],
) -> None:
    """doctor reads its flags like serve; the container gives serve flags in args, not in
    the environment, so the probe must repeat every one that doctor takes."""
    container = _container(daemonset)
    probe = container["readinessProbe"]["exec"]["command"]
    doctor = _option_names("doctor")
    shared = [a for a in container["args"] if a.split("=", 1)[0] in doctor]
    assert shared, "the agent's args name no source flag at all"
    assert sorted(probe[2:]) == sorted(shared)
    # the names are the container's: nvwatch is on the image's PATH
    assert probe[:2] == ["nvwatch", "doctor"]


def test_the_host_kernel_log_is_mounted_read_only_where_the_agent_reads_it(
    daemonset: dict[str, Any],
) -> None:
    spec = daemonset["spec"]["template"]["spec"]
    container = _container(daemonset)
    assert not any(a.startswith("--kmsg-path") for a in container["args"])  # the default
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    mount = mounts[str(DEFAULT_KMSG_PATH)]
    assert mount["readOnly"] is True
    [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["hostPath"] == {"path": str(DEFAULT_KMSG_PATH), "type": "CharDevice"}
    # the device cgroup lets a container open a host device only when privileged
    # (capabilities alone, SYSLOG included, get EPERM); the API server rejects privileged
    # together with allowPrivilegeEscalation: false, which no schema check catches
    security = container["securityContext"]
    assert security["privileged"] is True
    assert "allowPrivilegeEscalation" not in security
    assert security["readOnlyRootFilesystem"] is True


def test_the_rendered_daemonset_is_a_valid_kubernetes_object(daemonset: dict[str, Any]) -> None:
    for version in ("1.31.0", kubernetes_validate.latest_version()):
        kubernetes_validate.validate(daemonset, version, strict=True)


def test_systemd_analyze_verifies_the_unit(tmp_path: Path) -> None:
    """verify checks every directive and that the commands exist: the unit is rewritten to
    run this environment's nvwatch in place of the one its install lines make."""
    analyze = require_tool("systemd-analyze")
    nvwatch = Path(sys.executable).parent / "nvwatch"  # this environment's, PATH or not
    text = UNIT.read_text(encoding="utf-8")
    assert text.count(INSTALLED) >= 2  # ExecStartPre and ExecStart
    unit = tmp_path / "nvwatch.service"
    unit.write_text(text.replace(INSTALLED, str(nvwatch)), encoding="utf-8")
    done = subprocess.run(
        [analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stderr.strip() == "", done.stderr


def test_the_slurm_and_nhc_wiring_names_the_shipped_files() -> None:
    conf, nhc = _blocks("")
    [program] = [
        v for k, _, v in (x.partition("=") for x in conf.split()) if k == "HealthCheckProgram"
    ]
    assert (SLURM / Path(program).name).is_file()
    check = (SLURM / "nhc" / "nvwatch.nhc").read_text(encoding="utf-8")
    for line in nhc.strip().splitlines():
        mask, _, action = line.partition("||")
        assert mask.strip() == "*"
        action = action.strip()
        if action.startswith("export "):
            variable = action.removeprefix("export ").split("=", 1)[0]
            assert f'{variable}="${{{variable}:-' in check, f"{variable} is not a setting"
        else:
            assert f"function {action}() {{" in check
