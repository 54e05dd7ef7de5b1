"""`doctor --bmc-config FILE [--bmc-target HOST[:PORT]]...`: the BMC prober checked as
`serve` would run it.

Without a target, doctor only loads the file (a bad one is one line and exit 2, as for
`serve`) and says which modules it has: IPMI is sent to no one unless asked. Each
`--bmc-target` is read once with `--bmc-module`, exactly as `/probe` would read it (the
same reader, the module's own timeout); a target that cannot be read is a `down` finding
with the probe's own reason, and doctor exits 1, as for a source that is down.
"""

from __future__ import annotations

from collections.abc import Sequence

from nvwatch.agent import simulation
from nvwatch.agent.doctor import Finding
from nvwatch.agent.server.probe import ProbeError, parse_target
from nvwatch.agent.sources.bmc.config import BmcConfig
from nvwatch.agent.sources.bmc.reading import BmcError, BmcReader, Module, Target
from nvwatch.common.yaml_safe import ConfigError


def bmc_findings(
    path: str, bmc: BmcConfig, targets: Sequence[str], module_name: str
) -> list[Finding]:
    """One finding for the file, then one per target read; ConfigError (bad input) for
    an unknown module or a malformed target, before anything is sent."""
    module = bmc.modules.get(module_name)
    if module is None:
        known = ", ".join(sorted(bmc.modules)) or "none"
        raise ConfigError(f"--bmc-module {module_name!r}: {path} has no such module ({known})")
    try:
        parsed = [parse_target(target) for target in targets]
    except ProbeError as exc:
        raise ConfigError(f"--bmc-target: {exc}") from exc
    findings = [_loaded(path, bmc, bool(targets))]
    if parsed:
        reader = _reader()
        findings += [_read(reader, target, module) for target in parsed]
    return findings


def _loaded(path: str, bmc: BmcConfig, reading: bool) -> Finding:
    modules = ", ".join(
        f"{name} ({m.timeout_s:g} s, {'+'.join(sorted(m.collectors)) or 'no collectors'})"
        for name, m in sorted(bmc.modules.items())
    )
    hint = "" if reading else "; give --bmc-target HOST[:PORT] to read a BMC with one"
    return Finding("bmc-config", "loaded", f"{path}: modules {modules}{hint}")


def _reader() -> BmcReader:
    """The reader /probe uses: the simulated node's BMC inside --simulate, else IPMI."""
    simulated = simulation.simulated_bmc()
    if simulated is not None:
        return simulated[0]
    from nvwatch.agent.sources.bmc.ipmi import IpmiReader

    return IpmiReader()


def _read(reader: BmcReader, target: Target, module: Module) -> Finding:
    name = f"bmc {target}"
    try:
        reading = reader.read(target, module)
    except BmcError as exc:
        return Finding(name, "down", f"module {module.name}: {exc}")
    power = "" if reading.dcmi_watts is None else f", DCMI power {reading.dcmi_watts:g} W"
    return Finding(
        name,
        "up",
        f"module {module.name}: {len(reading.sensors)} sensors{power} in {reading.duration_s:.2f}s",
        duration_seconds=reading.duration_s,
    )
