"""`nvwatch inventory` with BMC addresses: the BMC targets, the nvwatch-bmc scrape job,
and every way the input can be wrong.

The scrape job is checked by a real `promtool check config`, the addresses it writes by
the probe's own target parser, and the job in deploy/prometheus/prometheus.yml against
what the command writes.
"""

from __future__ import annotations

import ipaddress
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvwatch.agent.cli import main
from nvwatch.agent.inventory import bmc_address, load_inventory
from nvwatch.agent.inventory_bmc import BMC_JOB, SCRAPE_FILE, scrape_job
from nvwatch.agent.server.probe import parse_target
from nvwatch.common.yaml_safe import ConfigError
from nvwatch.mixin.config import MixinConfig
from tests.conftest import require_tool

REPO = Path(__file__).resolve().parents[2]
PROBE = "127.0.0.1:9477"

INVENTORY = """\
hostname,address,node_class,rack,cluster,bmc,bmc_module
node01,10.10.10.101,dgx1-v100,r01,gpu,10.10.20.101,
node02,10.10.10.102,dgx1-v100,r01,gpu,,
node03,10.10.10.103,dgx-a100,r02,gpu,10.10.20.103:6230,old-bmc
node04,10.10.10.104,dgx-a100,r02,gpu,fd00:20::104,
"""


def _run(tmp_path: Path, body: str, *extra: str) -> tuple[int, str, Path]:
    """`nvwatch inventory` on `body`: (exit code, stderr's text, the output directory)."""
    path = tmp_path / "cluster.csv"
    path.write_text(body)
    out = tmp_path / "targets"
    try:
        main(["inventory", "--in", str(path), "--out", str(out), *extra])
    except SystemExit as exit_info:
        return int(exit_info.code or 0), "", out
    return 0, "", out


def _groups(out: Path, prefix: str) -> dict[str, dict[str, Any]]:
    """instance -> its target group, over every file of `prefix`."""
    groups = {}
    for path in sorted(out.glob(f"{prefix}*.json")):
        for group in json.loads(path.read_text()):
            groups[group["labels"]["instance"]] = group
    return groups


def test_bmc_targets_carry_their_nodes_labels(tmp_path: Path) -> None:
    code, _, out = _run(tmp_path, INVENTORY, "--bmc-probe", PROBE)
    assert code == 0
    agents, bmcs = _groups(out, "nvwatch-"), _groups(out, "bmc-")
    nodes = {n.hostname: n for n in load_inventory(tmp_path / "cluster.csv")}
    # the node without a BMC has its agent target only
    assert (
        set(bmcs)
        == {name for name, node in nodes.items() if node.bmc}
        == {
            "node01",
            "node03",
            "node04",
        }
    )
    for instance, group in bmcs.items():
        labels = dict(group["labels"])
        assert group["targets"] == [labels.pop("bmc")] == [nodes[instance].bmc]
        labels.pop("__param_module", None)
        # everything a GPU series of the node carries, so the two join on the node labels
        assert labels == agents[instance]["labels"]
    # a node's own module overrides the job's default, nobody else's
    assert bmcs["node03"]["labels"]["__param_module"] == "old-bmc"
    assert "__param_module" not in bmcs["node01"]["labels"]
    assert sorted(p.name for p in out.glob("bmc-*.json")) == [
        "bmc-dgx-a100.json",
        "bmc-dgx1-v100.json",
    ]


def test_the_job_matches_the_mixin_and_probes_through_the_management_host(
    tmp_path: Path,
) -> None:
    _, _, out = _run(tmp_path, INVENTORY, "--bmc-probe", PROBE, "--bmc-module", "dgx")
    (job,) = yaml.safe_load((out / SCRAPE_FILE).read_text())["scrape_configs"]
    assert job == scrape_job(out.resolve(), PROBE, "dgx")
    assert MixinConfig().bmc_job_selector == f'job="{job["job_name"]}"' == f'job="{BMC_JOB}"'
    assert job["metrics_path"] == "/probe" and job["params"] == {"module": ["dgx"]}
    files = job["file_sd_configs"][0]["files"]
    assert files == [str(out.resolve() / "bmc-*.json")]


@pytest.mark.parametrize(
    ("written", "normalised"),
    [
        ("10.10.20.101", "10.10.20.101"),
        ("10.10.20.101:6230", "10.10.20.101:6230"),
        ("fd00:20:0::104", "[fd00:20::104]:623"),
        ("[fd00:20::104]", "[fd00:20::104]:623"),
        ("[fd00:20::104]:6230", "[fd00:20::104]:6230"),
        ("node01-bmc.mgmt.example", "node01-bmc.mgmt.example"),
        ("node01-bmc:623", "node01-bmc:623"),
    ],
)
def test_bmc_addresses_are_targets_the_probe_reads_as_written(
    written: str, normalised: str
) -> None:
    address = bmc_address(written)
    assert address == normalised
    # the probe's own parser finds the same host and port in what the file_sd target
    # says as in what the operator wrote
    assert _host_and_port(address) == _host_and_port(written)


def _host_and_port(text: str) -> tuple[str, int]:
    target = parse_target(text)
    try:
        return str(ipaddress.ip_address(target.host)), target.port
    except ValueError:
        return target.host, target.port


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("node09,10.10.10.109,dgx-a100,r02,gpu,10.10.20.300,", "invalid bmc '10.10.20.300'"),
        ("node09,10.10.10.109,dgx-a100,r02,gpu,10.10.20.109:0,", "port '0' is not 1..65535"),
        ("node09,10.10.10.109,dgx-a100,r02,gpu,[fd00::1,", "in brackets"),
        ("node09,10.10.10.109,dgx-a100,r02,gpu,10.10.20.101,", "duplicate bmc 10.10.20.101"),
        (
            "node09,10.10.10.109,dgx-a100,r02,gpu,,dgx",
            "bmc_module 'dgx' for node09, which has no bmc",
        ),
        ("node09,10.10.10.109,dgx-a100,r02,gpu,10.10.20.109,a b", "invalid bmc_module 'a b'"),
    ],
)
def test_bad_bmc_columns_are_one_clear_line(tmp_path: Path, row: str, message: str) -> None:
    path = tmp_path / "cluster.csv"
    path.write_text(INVENTORY + row + "\n")
    with pytest.raises(ConfigError) as info:
        load_inventory(path)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert str(info.value).startswith(f"{path}:6: ")


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ((), "3 node(s) have a bmc address: --bmc-probe HOST:PORT"),
        (("--bmc-probe", "127.0.0.1"), "invalid --bmc-probe '127.0.0.1': give host:port"),
        (("--bmc-probe", "127.0.0.1:http"), "invalid --bmc-probe '127.0.0.1:http'"),
        (("--bmc-probe", PROBE, "--bmc-module", "a/b"), "invalid --bmc-module 'a/b'"),
    ],
)
def test_bad_flags_are_one_line_exit_2_and_write_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], message: str
) -> None:
    code, _, out = _run(tmp_path, INVENTORY, *flags)
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.startswith("nvwatch: error: ") and message in err and "\n" not in err
    assert not out.exists()


def test_bmc_files_of_nodes_that_lost_their_bmc_are_removed(tmp_path: Path) -> None:
    _run(tmp_path, INVENTORY, "--bmc-probe", PROBE)
    out = tmp_path / "targets"
    assert (out / SCRAPE_FILE).exists()
    # the a100s lose their BMC column: their file goes, the DGX-1's stays
    without_a100_bmcs = INVENTORY.replace(",10.10.20.103:6230,old-bmc", ",,").replace(
        ",fd00:20::104,", ",,"
    )
    _run(tmp_path, without_a100_bmcs, "--bmc-probe", PROBE)
    assert sorted(p.name for p in out.glob("bmc-*.json")) == ["bmc-dgx1-v100.json"]
    # no BMC at all: no BMC targets, no job, the agents' targets as before
    no_bmc = "\n".join(",".join(line.split(",")[:5]) for line in INVENTORY.splitlines()) + "\n"
    code, _, _ = _run(tmp_path, no_bmc)
    assert code == 0
    assert not list(out.glob("bmc-*.json")) and not (out / SCRAPE_FILE).exists()
    assert len(list(out.glob("nvwatch-*.json"))) == 2


def test_promtool_accepts_the_generated_job_beside_the_agents(tmp_path: Path) -> None:
    promtool = require_tool("promtool")
    _run(tmp_path, INVENTORY, "--bmc-probe", PROBE)
    out = (tmp_path / "targets").resolve()
    deployed = yaml.safe_load((REPO / "deploy/prometheus/prometheus.yml").read_text())
    (agents,) = [j for j in deployed["scrape_configs"] if j["job_name"] == "nvwatch"]
    agents["file_sd_configs"][0]["files"] = [str(out / "nvwatch-*.json")]
    generated = yaml.safe_load((out / SCRAPE_FILE).read_text())["scrape_configs"]
    config = {"global": deployed["global"], "scrape_configs": [agents, *generated]}
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [promtool, "check", "config", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_the_deployed_prometheus_has_the_job_the_command_writes() -> None:
    """deploy/prometheus/prometheus.yml's nvwatch-bmc job is what `nvwatch inventory --out
    /etc/prometheus/nvwatch/targets --bmc-probe 127.0.0.1:9477` writes."""
    deployed = yaml.safe_load((REPO / "deploy/prometheus/prometheus.yml").read_text())
    (job,) = [j for j in deployed["scrape_configs"] if j["job_name"] == BMC_JOB]
    assert job == scrape_job(Path("/etc/prometheus/nvwatch/targets"), PROBE)


def test_the_example_inventory_has_bmc_addresses() -> None:
    nodes = load_inventory(REPO / "deploy" / "inventory" / "cluster.example.csv")
    assert {n.bmc is not None for n in nodes} == {True, False}
