"""`nvwatch inventory`: a cluster inventory into Prometheus file_sd files, and the BMC
probe job when the inventory has BMC addresses."""

from __future__ import annotations

from pathlib import Path

import click

from nvwatch.agent.cli.options import option
from nvwatch.agent.inventory import DEFAULT_PORT, load_inventory, write_file_sd
from nvwatch.agent.inventory_bmc import (
    check_probe,
    module_name,
    probe_address,
    write_bmc,
)
from nvwatch.agent.sources.bmc.reading import DEFAULT_MODULE
from nvwatch.common.outputs import output_directory, writing


@click.command("inventory")
@option(
    "--in",
    "in_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="Cluster inventory: CSV or YAML with hostname, address, node_class, rack"
    "[, cluster][, bmc, bmc_module].",
)
@option("--out", required=True, type=click.Path(file_okay=False), help="Directory for file_sd.")
@option("--port", type=int, default=DEFAULT_PORT, show_default=True, help="Agent port on nodes.")
@option(
    "--bmc-probe",
    help="HOST:PORT of the nvwatch that reads the BMCs (serve --bmc-config): the address the "
    "nvwatch-bmc scrape job sends every BMC's /probe to. Required when a node has a bmc.",
)
@option(
    "--bmc-module",
    default=DEFAULT_MODULE,
    show_default=True,
    help="BMC config module of the nodes whose bmc_module column is empty.",
)
def inventory_command(
    in_path: str, out: str, port: int, bmc_probe: str | None, bmc_module: str
) -> None:
    """Turn a cluster inventory into Prometheus file_sd files, one per node class, and,
    for nodes with a BMC address, the BMC targets and the nvwatch-bmc scrape job."""
    probe = None if bmc_probe is None else probe_address(bmc_probe)
    module = module_name(bmc_module)
    nodes = load_inventory(Path(in_path))
    check_probe(nodes, probe)
    out_dir = output_directory(out)
    with writing():
        written = write_file_sd(nodes, out_dir, port)
        written += write_bmc(nodes, out_dir, probe, module)
    for path in written:
        click.echo(path)
