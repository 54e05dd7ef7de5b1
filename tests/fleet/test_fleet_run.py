"""A running simulated fleet: each node's agent reads its own simulated node, and stopping
the fleet ends every thread it started."""

from __future__ import annotations

import sys
import threading
import time
import urllib.request

from nvwatch.agent.threads import AGENT_SWITCH_INTERVAL_S
from nvwatch.sim.fleet.fleet import Fleet


def _new_threads(before: set[threading.Thread]) -> set[threading.Thread]:
    return set(threading.enumerate()) - before


def test_each_node_serves_its_own_gpus_and_stop_leaves_no_thread() -> None:
    before = set(threading.enumerate())
    switch_before = sys.getswitchinterval()
    fleet = Fleet(["dgx1-v100", "dgx-a100"], base_port=0, interval=0.5)
    assert _new_threads(before) == set(), "planning a fleet must start nothing"
    fleet.start()
    try:
        # the nodes' polls share one GIL, handed over as often as `serve` hands it over
        assert sys.getswitchinterval() == AGENT_SWITCH_INTERVAL_S != switch_before
        names = {t.name for t in _new_threads(before)}
        assert {"nvwatch-fleet-tick", "nvwatch-poller", "nvwatch-http"} <= names
        assert "nvwatch-source-nvml" in names
        bodies = [urllib.request.urlopen(n.url, timeout=10).read().decode() for n in fleet.nodes]
    finally:
        fleet.stop()
    assert sys.getswitchinterval() == switch_before
    # the NVML source's worker threads run in the context that binds their node's NVML
    assert "V100" in bodies[0] and "A100" not in bodies[0]
    assert "A100" in bodies[1] and "V100" not in bodies[1]
    deadline = time.monotonic() + 3  # an XID listener wakes at most every 0.5 s
    while _new_threads(before) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert {t.name for t in _new_threads(before)} == set()
