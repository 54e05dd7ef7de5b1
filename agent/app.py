"""Wire sources -> poller -> exposition -> server for one agent, and run it."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from nvwatch.agent.config import AgentConfig, ConfigError, format_listen
from nvwatch.agent.exposition.render import Exposition, build_exposition, prepare
from nvwatch.agent.poller import Poller, Snapshot
from nvwatch.agent.server import Health, HttpState, MetricsServer, listen
from nvwatch.agent.server.probe import ProbeService
from nvwatch.agent.sources import Source
from nvwatch.agent.webconfig import WebConfig, load_web_config

log = logging.getLogger(__name__)


class StartupError(RuntimeError):
    """The agent cannot start (address in use, bad certificate): exit code 2."""


# The poll loop died while serving: exit so a supervisor (systemd Restart=on-failure, a
# Kubernetes restartPolicy) starts a fresh agent, instead of serving stale data behind
# a 503 forever. 1, like any crash; 2 stays "bad input".
EXIT_POLL_LOOP_DIED = 1


@dataclass
class Agent:
    """A poller feeding the exposition cache; the server reads `exposition()`."""

    config: AgentConfig
    sources: list[Source]
    poller: Poller = field(init=False)
    _exposition: Exposition | None = field(init=False, default=None)
    # the HTTP server's counts, published with each poll (set by make_server)
    http_state: Callable[[], HttpState] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self.poller = Poller(
            self.sources,
            interval=self.config.interval,
            timeout=self.config.timeout,
            prepare=prepare,
            on_snapshot=self._publish,
            stuck_after=self.config.stale_after,
        )

    def _publish(self, snapshot: Snapshot) -> None:
        # one reference swap: a scrape sees the old or the new exposition, never a mix
        http = self.http_state() if self.http_state is not None else None
        self._exposition = build_exposition(snapshot, http, self.config.simulate)

    def exposition(self) -> Exposition | None:
        return self._exposition

    def health(self) -> Health:
        """/healthz: the poll loop runs, its last poll is fresh and no source is stuck
        (what a readiness probe or a health check wants)."""
        health = self.liveness()
        stuck = self.poller.stuck()
        if health.ok and stuck:
            return Health(False, _stuck_detail(stuck, self.config.stale_after))
        return health

    def liveness(self) -> Health:
        """/livez: the poll loop runs and its last poll is fresh. A stuck source is left
        out: restarting the agent does not unwedge a GPU, and a liveness probe that did
        would restart it in a loop, dark for the node's other sources each time."""
        latest = self.poller.latest
        if latest is None:
            return Health(False, "no poll has completed yet")
        age = time.monotonic() - latest.completed_monotonic
        limit = self.config.stale_after
        if age > limit:
            return Health(False, f"last poll {age:.1f}s ago (limit {limit:g}s)")
        if not self.poller.alive():
            return Health(False, "poll loop is not running")
        return Health(True, f"last poll {age:.1f}s ago, every {self.config.interval:g}s")


def _stuck_detail(stuck: dict[str, float], limit: float) -> str:
    """`source nvml stuck in one poll for 73.2s (limit 23s)`, every stuck source named:
    its series are as old as a stopped poll loop's would be, so a readiness probe or a
    Slurm health check must see it, though the other sources are fresh."""
    each = ", ".join(f"{name} stuck in one poll for {s:.1f}s" for name, s in sorted(stuck.items()))
    return f"source {each} (limit {limit:g}s)"


def web_config_of(config: AgentConfig) -> WebConfig | None:
    """The --web-config file, loaded and checked; ConfigError (one line) when it is bad."""
    if config.web_config is None:
        return None
    try:
        return load_web_config(config.web_config)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc


def bind(config: AgentConfig) -> socket.socket:
    """The agent's listening socket; StartupError (one line) when the address is taken
    or cannot be bound. `nvwatch serve` binds first, so a port in use is its only line,
    not the last after a simulated node's banner."""
    try:
        return listen(config.listen_host, config.listen_port, config.listen_ipv6_only)
    except OSError as exc:
        where = format_listen(config.listen_host, config.listen_port, config.listen_ipv6_only)
        raise StartupError(f"cannot listen on {where}: {exc.strerror or exc}") from exc


def make_server(
    agent: Agent,
    web: WebConfig | None = None,
    probe: ProbeService | None = None,
    listener: socket.socket | None = None,
) -> MetricsServer:
    """The server for `agent`; `web` when the caller loaded the web config already;
    `probe` answers /probe for BMCs (agent/bmc_probe.py); `listener` when the caller
    bound the address already (`bind`)."""
    if web is None:
        web = web_config_of(agent.config)
    listener = listener or bind(agent.config)
    try:
        server = MetricsServer(
            agent.config.listen_host,
            agent.config.listen_port,
            ipv6_only=agent.config.listen_ipv6_only,
            exposition=agent.exposition,
            health=agent.health,
            web_config=web,
            probe=probe.respond if probe is not None else None,
            listener=listener,
            liveness=agent.liveness,
        )
    except BaseException:
        listener.close()
        raise
    agent.http_state = server.http_state
    return server


def serve(
    config: AgentConfig,
    sources: list[Source],
    *,
    ready: Callable[[MetricsServer], None] | None = None,
    stop: threading.Event | None = None,
    web: WebConfig | None = None,
    probe: ProbeService | None = None,
    listener: socket.socket | None = None,
) -> int:
    """Poll and serve until `stop` is set; returns the exit code.

    Signals are the command line's business: `nvwatch serve` sets `stop` on SIGTERM and
    SIGINT (agent/cli). Without `stop`, this runs until the process ends.
    """
    agent = Agent(config, sources)
    # nothing has started yet: if binding fails there is nothing to stop
    server = make_server(agent, web, probe, listener)
    stop = stop or threading.Event()
    if stop.is_set():  # a stop signal came while the agent was starting
        server.stop()
        return 0
    # the first poll before listening: the first scrape already has data
    agent.poller.poll_once()
    agent.poller.start(on_death=lambda _exc: stop.set())
    server.start()
    log.info(
        "nvwatch listening on %s, polling %s every %gs",
        format_listen(config.listen_host, server.port, config.listen_ipv6_only),
        ",".join(config.sources),
        config.interval,
    )
    if ready is not None:
        ready(server)
    stop.wait()
    server.stop()
    agent.poller.stop(timeout=0.5)
    return _exit_code(agent.poller.failure)


def _exit_code(failure: BaseException | None) -> int:
    """0 after a requested stop; after the poll loop's death, one line on why and 1."""
    if failure is None:
        return 0
    frames = traceback.extract_tb(failure.__traceback__)
    where = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
    log.error(
        "poll loop died%s: %s: %s; exiting %d so a supervisor restarts the agent",
        where,
        type(failure).__name__,
        " ".join(str(failure).split()) or "(no message)",
        EXIT_POLL_LOOP_DIED,
    )
    return EXIT_POLL_LOOP_DIED


def poll_and_render(config: AgentConfig, sources: list[Source], settle: float) -> Exposition:
    """For `nvwatch dump`: poll, wait `settle` so rates have an interval, poll again."""
    agent = Agent(config, sources)
    try:
        agent.poller.poll_once()
        if settle > 0:
            time.sleep(settle)
            agent.poller.poll_once()
        exposition = agent.exposition()
        assert exposition is not None
        return exposition
    finally:
        agent.poller.stop(timeout=0.5)
