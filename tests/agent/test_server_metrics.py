"""The server's refusals and connections, exported as the agent's own metrics."""

from __future__ import annotations

import re
import time

from nvwatch.agent.app import Agent, make_server
from nvwatch.agent.config import AgentConfig
from nvwatch.agent.server import REFUSAL_REASONS
from tests.agent.fakes import CountingHostSource
from tests.agent.server_helpers import exchange

SCRAPE = b"GET /metrics HTTP/1.1\r\nHost: node\r\nConnection: close\r\n\r\n"


def test_refusals_are_exported_after_the_next_poll() -> None:
    config = AgentConfig(listen_host="127.0.0.1", listen_port=0, interval=1, sources=("host",))
    agent = Agent(config, [CountingHostSource()])
    server = make_server(agent)
    agent.poller.poll_once()
    server.start()
    try:
        text = exchange(server.port, SCRAPE).decode()
        # every reason is there from the start, at 0
        for reason in REFUSAL_REASONS:
            assert f'nvwatch_agent_http_requests_refused_total{{reason="{reason}"}} 0.0' in text
        exchange(server.port, b"DELETE /metrics HTTP/1.1\r\nHost: node\r\n\r\n")
        exchange(server.port, b"GET /\x01 HTTP/1.1\r\n\r\n")
        # a closed connection stays open on our side until the client has acknowledged
        # its reply, which the loop checks once per tick (0.25 s)
        time.sleep(0.6)
        agent.poller.poll_once()
        text = exchange(server.port, SCRAPE).decode()
    finally:
        server.stop()
        agent.poller.stop()
    assert 'nvwatch_agent_http_requests_refused_total{reason="method_not_allowed"} 1.0' in text
    assert 'nvwatch_agent_http_requests_refused_total{reason="malformed"} 1.0' in text
    # the last refused connection may still be closing when the poll reads the count
    assert re.search(r"^nvwatch_agent_http_connections_open [01]\.0$", text, re.MULTILINE)
    assert re.search(r"^nvwatch_agent_http_connections_limit \d+\.0$", text, re.MULTILINE)
