"""`nvwatch report`: a capacity review document (HTML, JSON, CSV) from Prometheus history.

The report computes with numpy and plots with matplotlib, an optional extra
(`pip install 'nvwatch[report]'`); nothing here imports them at package import time, so
the agent runs without them, and `nvwatch report` checks for them before anything else.
"""
