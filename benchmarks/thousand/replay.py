"""Cheap replaying targets: the live minutes after a bulk history, so that Prometheus
scrapes a thousand nodes and evaluates its rules over them as it would on a real fleet.

One HTTP server on loopback answers `/node/<name>/metrics` for every node, and
`/probe?target=<BMC>` for its BMC, with the series the bulk history wrote for them:
gauges hold their last value, counters go on at their last step's rate, so rates over
the join of history and live data stay what the history ended with, and the agent's
last-poll time keeps time (held, every node would look stale two minutes on and a
thousand NvwatchAgentStale alerts would fire). A node's text is a list of prefixes
made once and values formatted per scrape: a thousand nodes and their BMCs at 30 s is
67 scrapes a second, a small share of a core.
"""

from __future__ import annotations

import json
import multiprocessing
import signal
import threading
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np
import numpy.typing as npt

from nvwatch.agent.inventory_bmc import BMC_FILE_PREFIX, PROBE_PATH
from nvwatch.sim.bulk.templates import Template, node_series
from nvwatch.sim.bulk.values import MOTIONS
from nvwatch.sim.bulk.write import BulkPlan, BulkResult, SeriesBatch, node_specs
from nvwatch.sim.fleet.plan import NodeSpec, bmc_file_sd_groups, node_labels
from nvwatch.sim.tsdb.block import BlockWriter
from nvwatch.sim.tsdb.index import Labels
from nvwatch.sim.tsdb.xor import Grid

# labels Prometheus adds from the scrape (job) or the target group (the rest)
_TARGET_LABELS = frozenset({"__name__", "job", "cluster", "rack", "node_class", "instance", "bmc"})


@dataclass(frozen=True)
class ReplayNode:
    prefixes: tuple[str, ...]
    last: npt.NDArray[np.float64]
    per_second: npt.NDArray[np.float64]  # counters' last rate, a clock's 1, 0 for the rest
    since: float  # the history's last sample, unix seconds

    def text(self, now: float) -> bytes:
        values = self.last + self.per_second * max(0.0, now - self.since)
        lines = [p + repr(v) for p, v in zip(self.prefixes, values.tolist(), strict=True)]
        return ("\n".join(lines) + "\n").encode()


def replay_node(
    template: Template,
    spec: NodeSpec,
    tail: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]],
    step_s: float,
    since: float,
    running: Sequence[Labels] = (),
) -> tuple[ReplayNode, ReplayNode]:
    """Node `spec`'s agent, with the allocations of its `running` job, and its BMC (the
    body of its probe), each going on from `tail`."""
    # labelled once for both: a thousand nodes' templates are most of start-up's work
    every = node_series(template, spec)
    agent = _replaying(template, every, ~template.bmc, tail, step_s, since, running)
    return agent, _replaying(template, every, template.bmc, tail, step_s, since)


def _replaying(
    template: Template,
    every: Sequence[Labels],
    rows: npt.NDArray[np.bool_],
    tail: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]],
    step_s: float,
    since: float,
    running: Sequence[Labels] = (),
) -> ReplayNode:
    series = [labels for labels, kept in zip(every, rows, strict=True) if kept]
    prefixes = [_prefix(labels) for labels in (*series, *running)]
    last, per_second = (values[rows] for values in going_on(template, tail, step_s))
    held = np.ones(len(running))  # an allocation's value is always 1
    return ReplayNode(tuple(prefixes), np.concatenate([last, held]),
                      np.concatenate([per_second, np.zeros(len(running))]), since)  # fmt: skip


def going_on(
    template: Template,
    tail: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]],
    step_s: float,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Each template row's last value and how fast it goes on from there: a counter at
    its last step's rate, a clock at a second a second, the rest held."""
    previous, last = tail
    counters = np.array([kind == "counter" for kind in template.kinds])
    per_second = np.where(counters, (last - previous) / step_s, 0.0)
    clocks = np.array(
        [name in MOTIONS and MOTIONS[name].kind == "clock" for name in template.names]
    )
    return last, np.where(clocks, 1.0, per_second)


def write_gap(plan: BulkPlan, result: BulkResult, end_s: float, out: Path) -> int:
    """What the replaying targets answer from the history's end to `end_s`, at its
    step, as a block under `out`; its samples (none if no step falls there): the
    minutes an engine that started scraping after the history's end would otherwise
    hold nothing of."""
    grid = plan.grid
    first_ms = grid.time_ms(grid.count)  # the step after the history's last
    count = int((end_s * 1000 - first_ms) // grid.step_ms) + 1
    if count < 1:
        return 0
    gap = Grid(first_ms, grid.step_ms, count)
    after = (first_ms + grid.step_ms * np.arange(count)) / 1000.0 - plan.last_sample_s
    writer = BlockWriter(out, gap)
    batch = SeriesBatch(writer)
    for spec in node_specs(plan):
        template = result.templates[spec.profile]
        last, per_second = going_on(template, result.tails[spec.name], plan.step_s)
        batch.add(node_series(template, spec), last[:, None] + per_second[:, None] * after)
        for labels in result.running[spec.name]:
            writer.add_span(labels, 0, count)
    batch.flush()
    writer.close()
    return writer.series * count


def _prefix(labels: Labels) -> str:
    name = dict(labels)["__name__"]
    own = ",".join(f'{k}="{_escaped(v)}"' for k, v in labels if k not in _TARGET_LABELS)
    return f"{name}{{{own}}} " if own else f"{name} "


def _escaped(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class ReplayServer:
    """Serves every node on one loopback port until `close()`: its agent at
    `/node/<name>/metrics`, its BMC at `/probe?target=<BMC address>`, as the management
    host's nvwatch answers the `nvwatch-bmc` job."""

    def __init__(
        self, nodes: dict[str, ReplayNode], bmcs: dict[str, ReplayNode] | None = None
    ) -> None:
        self.nodes = nodes
        self.bmcs = bmcs or {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                node = server.target(self.path)
                if node is None:
                    self.send_error(404)
                    return
                body = node.text(time.time())
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                return  # a thousand scrapes a minute: no line each

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="replay", daemon=True)
        self.thread.start()

    def target(self, path: str) -> ReplayNode | None:
        url = urllib.parse.urlsplit(path)
        if url.path == PROBE_PATH:
            bmc = urllib.parse.parse_qs(url.query).get("target", [""])[0]
            return self.bmcs.get(bmc)
        parts = url.path.strip("/").split("/")
        return self.nodes.get(parts[1]) if len(parts) == 3 else None

    @property
    def address(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"{host}:{port}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=10)


class ReplayProcess:
    """A ReplayServer in a process of its own (forked, so the nodes are not copied):
    in the benchmark's process, reading a large query answer holds the interpreter
    while Prometheus waits on scrapes, and scrapes time out."""

    def __init__(
        self, nodes: dict[str, ReplayNode], bmcs: dict[str, ReplayNode] | None = None
    ) -> None:
        context = multiprocessing.get_context("fork")
        ours, theirs = context.Pipe()
        self.process = context.Process(target=_serve, args=(nodes, bmcs, theirs), daemon=True)
        self.process.start()
        if not ours.poll(60):
            self.close()
            raise RuntimeError("the replaying targets did not start")
        self.address: str = ours.recv()

    def close(self) -> None:
        self.process.terminate()
        self.process.join(10)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(10)


def _serve(
    nodes: dict[str, ReplayNode], bmcs: dict[str, ReplayNode] | None, parent: Connection
) -> None:
    # forked with the run's handlers, under which a stop is a KeyboardInterrupt and its
    # traceback; the run stops this process itself (ReplayProcess.close), by SIGTERM
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    server = ReplayServer(nodes, bmcs)
    parent.send(server.address)
    server.thread.join()


def write_targets(address: str, specs: list[NodeSpec], directory: Path) -> Path:
    """file_sd groups: every node at `address`, under its own path and labels; and in
    bmc_targets(directory) every BMC, as `nvwatch inventory` writes them (the
    `nvwatch-bmc` job probes them at `address`)."""
    groups = [
        {
            "targets": [address],
            "labels": {**node_labels(s), "__metrics_path__": f"/node/{s.name}/metrics"},
        }
        for s in specs
    ]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "replay.json"
    path.write_text(json.dumps(groups))
    bmcs = bmc_targets(directory)
    bmcs.mkdir(exist_ok=True)
    (bmcs / f"{BMC_FILE_PREFIX}replay.json").write_text(json.dumps(bmc_file_sd_groups(specs)))
    return path


def bmc_targets(directory: Path) -> Path:
    """Where write_targets puts the BMCs' file_sd groups: a folder of `directory`, apart
    from the agents' groups, which the agents' job reads as every JSON file there."""
    return directory / "bmc"
