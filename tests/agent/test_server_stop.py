"""Stopping the server while scrapers hold keep-alive connections open."""

from __future__ import annotations

import http.client
import threading
import time

from nvwatch.agent.app import Agent, make_server
from nvwatch.agent.config import AgentConfig
from tests.agent.fakes import CountingHostSource


def test_stop_fails_open_keep_alive_connections_instead_of_waiting() -> None:
    config = AgentConfig(listen_host="127.0.0.1", listen_port=0, interval=0.2, sources=("host",))
    agent = Agent(config, [CountingHostSource()])
    server = make_server(agent)
    agent.poller.poll_once()
    server.start()
    # Prometheus keeps one HTTP/1.1 connection per target open between scrapes
    clients = [http.client.HTTPConnection("127.0.0.1", server.port, timeout=5) for _ in range(3)]
    try:
        for client in clients:
            client.request("GET", "/metrics")
            assert client.getresponse().read()
        started = time.monotonic()
        stopper = threading.Thread(target=server.stop)
        stopper.start()
        stopper.join(timeout=10)
        assert not stopper.is_alive(), "stop() waited on a scraper's idle connection"
        assert time.monotonic() - started < 3
        # the open connection is failed, as it would be by a killed agent
        clients[0].request("GET", "/metrics")
        try:
            clients[0].getresponse()
            failed = False
        except (ConnectionError, http.client.HTTPException, OSError):
            failed = True
        assert failed
        alive = [t.name for t in threading.enumerate() if t.name.startswith("nvwatch-http")]
        assert not alive
    finally:
        for client in clients:
            client.close()
        agent.poller.stop()
