"""`nvwatch report`: a capacity review document (HTML, JSON, CSV) from Prometheus history.

Plotting needs matplotlib, an optional extra (`pip install 'nvwatch[report]'`); nothing
here imports it at package import time, so the agent runs without it.
"""
