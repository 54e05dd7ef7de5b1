"""`nvwatch inventory`: a cluster inventory into Prometheus file_sd files."""

from __future__ import annotations

from pathlib import Path

import click

from nvwatch.agent.cli.options import option
from nvwatch.agent.inventory import DEFAULT_PORT, load_inventory, write_file_sd
from nvwatch.common.outputs import output_directory, writing


@click.command("inventory")
@option(
    "--in",
    "in_path",
    required=True,
    type=click.Path(dir_okay=False),
    help="Cluster inventory: CSV or YAML with hostname, address, node_class, rack[, cluster].",
)
@option("--out", required=True, type=click.Path(file_okay=False), help="Directory for file_sd.")
@option("--port", type=int, default=DEFAULT_PORT, show_default=True, help="Agent port on nodes.")
def inventory_command(in_path: str, out: str, port: int) -> None:
    """Turn a cluster inventory into Prometheus file_sd files, one per node class."""
    nodes = load_inventory(Path(in_path))
    out_dir = output_directory(out)
    with writing():
        written = write_file_sd(nodes, out_dir, port)
    for path in written:
        click.echo(path)
