"""`nvwatch report`: a capacity review document (HTML, JSON, CSV) from Prometheus history.

A Prometheus client, not part of the node agent: it reads the mixin config (selectors,
thresholds, the rack power plan) and never imports the agent's server or sources
(tests/test_import_cycles.py). The `nvwatch report` command (agent/cli/) is its door.

The report computes with numpy and plots with matplotlib, an optional extra
(`pip install 'nvwatch[report]'`); nothing here imports them at package import time, so
the agent runs without them, and `nvwatch report` checks for them before anything else.
"""
