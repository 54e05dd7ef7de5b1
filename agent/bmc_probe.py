"""`serve --bmc-config FILE`: the /probe service over the BMCs that file's modules read.

Loaded before anything starts, so a bad file is one line and exit 2 like any bad input.
A real agent reads BMCs over IPMI (python-ipmi, imported only here, only with a BMC
config); a simulated one answers for its simulated node's BMC, with the file's modules
or, without one, the simulator's built-in `default` module.
"""

from __future__ import annotations

import logging
from pathlib import Path

from nvwatch.agent import simulation
from nvwatch.agent.config import AgentConfig
from nvwatch.agent.server.probe import ProbeService
from nvwatch.agent.sources.bmc.config import BmcConfig, load_bmc_config
from nvwatch.common.yaml_safe import ConfigError

log = logging.getLogger(__name__)


def bmc_config_of(config: AgentConfig) -> BmcConfig | None:
    """The --bmc-config file, loaded and checked; ConfigError (one line) when it is bad."""
    if config.bmc_allow is not None and config.bmc_config is None and not config.simulate:
        raise ConfigError("--bmc-allow lists the targets /probe may read: give --bmc-config")
    return None if config.bmc_config is None else load_bmc_config(config.bmc_config)


def probe_service(config: AgentConfig, bmc: BmcConfig | None) -> ProbeService | None:
    """The /probe service `config` asks for; call inside the simulated node's block when
    simulating. None: this agent probes no BMC (/probe answers 404 and says why)."""
    from nvwatch.agent.exposition.bmc import probe_exposition

    simulated = simulation.simulated_bmc() if config.simulate else None
    if simulated is not None:
        reader, module, address = simulated
        modules = dict(bmc.modules) if bmc is not None else {module.name: module}
        log.info("/probe reads the simulated BMC: target=%s, modules %s", address, sorted(modules))
    elif bmc is None:
        return None
    else:
        from nvwatch.agent.sources.bmc.ipmi import IpmiReader

        reader, modules = IpmiReader(), dict(bmc.modules)
    if bmc is not None:
        _log_loaded(config.bmc_config, bmc)
    allowed = None
    if config.bmc_allow is not None:
        # only an agent given --bmc-allow loads the allowlist's matching
        from nvwatch.agent.server.probe_allow import ProbeAllowlist

        allowed = ProbeAllowlist(config.bmc_allow).permits
    return ProbeService(
        modules, reader, probe_exposition, cache_s=config.bmc_cache, allowed=allowed
    )


def _log_loaded(path: Path | None, bmc: BmcConfig) -> None:
    log.info("BMC config %s: modules %s", path, ", ".join(sorted(bmc.modules)))
    if bmc.unused_keys:
        # once, at start: a site moving from ipmi_exporter sees what nvwatch does not do
        log.info(
            "BMC config %s: accepted but not used by nvwatch: %s", path, ", ".join(bmc.unused_keys)
        )
