"""One BMC probe -> the Prometheus text body of /probe, from the catalogue.

A probe is rendered once per scrape (no cache of bytes as /metrics has): the families
are filled by looping over the catalogue's BMC entries, exactly as /metrics's are, and
written by prometheus_client's own renderer (text format 0.0.4) from a private registry.
A failed probe says `nvwatch_bmc_up 0`, how long it tried, and why, in a comment line.
"""

from __future__ import annotations

from prometheus_client.exposition import generate_latest

from nvwatch.agent.catalogue import Scope, of_scope
from nvwatch.agent.exposition.client import registry_of
from nvwatch.agent.exposition.families import FamilySet
from nvwatch.agent.exposition.series import compiled_families, emit_all
from nvwatch.agent.sources.bmc.interpret import BmcProbe, failed, interpret
from nvwatch.agent.sources.bmc.reading import BmcReading, Module

_PROBE_PLANS = compiled_families(of_scope(Scope.BMC))
_SENSOR_PLANS = compiled_families(of_scope(Scope.BMC_SENSOR))
MAX_REASON_CHARS = 300  # a reason is one line: the probe body is no place for a dump


def probe_exposition(
    reading: BmcReading | None,
    failure: str | None,
    module: Module,
    *,
    duration_s: float | None = None,
) -> bytes:
    """The body of one probe: `reading` interpreted by `module`'s rules, or, with
    `failure` set, `nvwatch_bmc_up 0`, the time the caller measured (`duration_s`) and
    the reason as a `# ` comment."""
    if failure is not None or reading is None:
        reason = failure or "no reading"
        return _comment(reason) + render(failed(duration_s, module.collectors))
    return render(interpret(reading, module))


def render(probe: BmcProbe) -> bytes:
    """The families of one probe, in catalogue order, as prometheus_client writes them."""
    out = FamilySet()
    families(probe, out)
    return generate_latest(registry_of(out))


def families(probe: BmcProbe, out: FamilySet) -> None:
    """One probe's families: the renderer the bmc declaration names, shaped like a polled
    source's (agent/sources/bmc/declaration.py)."""
    emit_all(_PROBE_PLANS, [((), probe)], out)
    emit_all(_SENSOR_PLANS, [((sensor.name,), sensor) for sensor in probe.sensors], out)


def _comment(reason: str) -> bytes:
    """`# nvwatch_bmc_up 0: <reason>`: one line, never a HELP or TYPE line."""
    flat = " ".join(reason.split())
    if len(flat) > MAX_REASON_CHARS:
        flat = flat[:MAX_REASON_CHARS] + "…"
    return f"# nvwatch_bmc_up 0: {flat}\n".encode()
