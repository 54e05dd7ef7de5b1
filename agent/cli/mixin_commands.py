"""`nvwatch dashboards build` and `nvwatch alerts build`, defined in mixin/commands.py.

They live with the mixin so that `python -m alerts.build` / `python -m dashboards.build`
run the very same commands without importing the agent; this module only puts them on
`nvwatch`.
"""

from __future__ import annotations

from agent.cli import cli
from mixin.commands import alerts_group, dashboards_group

cli.add_command(dashboards_group)
cli.add_command(alerts_group)
