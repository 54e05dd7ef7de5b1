"""The global server of a Prometheus-only fleet past one server, measured live: the
server of deploy/scale/prometheus-global.yml federating from the Prometheus that holds
the thousand nodes, as it would from each rack's.

Here one server holds every rack, so the global server's one federation target answers
for all of them at once: its answer (seconds, bytes, series) is what the rack servers
answer together each minute, each rack's a share of it. The target's scrape timeout is
raised to most of the minute for that reason, and said so; every other setting is the
file's. Measured: one /federate answer taken as the global server takes it, the global
server's scrapes (their duration and samples, and those dropped as a second value of a
series at one timestamp), its series, its rule groups' evaluation times (the cluster
and rack roll-ups recomputed there), and its memory.
"""

from __future__ import annotations

import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from benchmarks.common import stop
from benchmarks.scale import measure as m
from benchmarks.scale.stack import Stack
from benchmarks.thousand.recorded import MINUTE_S
from benchmarks.thousand.rule_timing import rule_groups
from nvwatch.alerts import build as alerts_build
from tests.e2e.loopback import Endpoint, wait_for
from tests.e2e.service_commands import prometheus_argv, write_yaml

GLOBAL = Path(__file__).resolve().parents[2] / "deploy" / "scale" / "prometheus-global.yml"
ONE_TARGET_TIMEOUT = "55s"  # one target answers for every rack: most of the minute
SCRAPES = 2  # the global server's federation scrapes before it is read
WAIT_S = 600.0
NAME = "prometheus-global"


def match_selectors() -> list[str]:
    """The file's federation selectors, as the global server sends them."""
    job = yaml.safe_load(GLOBAL.read_text())["scrape_configs"][0]
    selectors: list[str] = job["params"]["match[]"]
    return selectors


def global_config(rack: Endpoint, rule_dir: Path, work: Path) -> Path:
    """The file's configuration with its rule file from `rule_dir` and its one rack
    target the server at `rack`."""
    config = yaml.safe_load(GLOBAL.read_text())
    config["rule_files"] = [str(rule_dir / Path(p).name) for p in config["rule_files"]]
    job = config["scrape_configs"][0]
    job["scrape_timeout"] = ONE_TARGET_TIMEOUT
    racks = work / "racks"
    racks.mkdir(exist_ok=True)
    (racks / "all.json").write_text(f'[{{"targets": ["{rack.address}"]}}]\n')
    job["file_sd_configs"] = [{"files": [str(racks / "*.json")]}]
    return write_yaml(work / "prometheus-global.yml", config)


def one_answer(rack_url: str) -> dict[str, float]:
    """One /federate answer with the file's selectors: seconds, bytes and series."""
    query = urllib.parse.urlencode([("match[]", s) for s in match_selectors()])
    began = time.perf_counter()
    with urllib.request.urlopen(f"{rack_url}/federate?{query}", timeout=120) as answer:
        body = answer.read()
    seconds = time.perf_counter() - began
    series = sum(1 for line in body.splitlines() if line and not line.startswith(b"#"))
    return {"seconds": seconds, "bytes": len(body), "series": series}


def measure_federation(stack: Stack, rack: Endpoint, rule_dir: Path) -> dict[str, Any]:
    """The global server run beside the rack server until it has federated SCRAPES
    times and evaluated each minute rule group once; its figures, or the error that stopped it."""
    try:
        answer = one_answer(rack.url)
        work = stack.workdir / "global"
        work.mkdir()
        endpoint = Endpoint.free()
        config = global_config(rack, rule_dir, work)
        argv = prometheus_argv("prometheus", config, work / "data", endpoint)
        stack.spawn(NAME, argv, f"{endpoint.url}/-/ready")
        try:
            return {"answer": answer, **_global_figures(stack, endpoint.url, rule_dir)}
        finally:
            stop(stack.processes.pop(NAME))
    except Exception as err:  # a measurement that failed is a figure, not a crashed run
        return {"error": f"{type(err).__name__}: {err}"}


def _global_figures(stack: Stack, url: str, rule_dir: Path) -> dict[str, Any]:
    # the minute groups of the file the global server evaluates: the roll-ups over the
    # federated series (the report's rules are a node's, GPU's or port's: federated)
    every = rule_groups([rule_dir / alerts_build.GLOBAL_RECORDING])
    groups = {g: i for g, i in every.items() if i <= MINUTE_S}
    wait_for(f"{url} to federate {SCRAPES} times", lambda: _scraped(url) >= SCRAPES,
             WAIT_S, every=5)  # fmt: skip
    wait_for(f"{url} to evaluate every rule group", lambda: _evaluated(url, groups),
             WAIT_S, every=5)  # fmt: skip
    durations = m.query(url, 'scrape_duration_seconds{job="federate"}[10m]')
    samples = m.query(url, 'scrape_samples_scraped{job="federate"}')
    metrics = m.scrape_metrics(url)
    seconds = m.rule_group_seconds(metrics)
    return {
        "scrape_seconds": [float(v) for _, v in durations[0]["values"]] if durations else [],
        "samples_scraped": float(samples[0]["value"][1]) if samples else 0.0,
        "head_series": m.one(metrics, "prometheus_tsdb_head_series"),
        # samples dropped for a second writer of one series at one timestamp: a rule
        # evaluated on the global server too, into a series it federates
        "duplicate_samples": m.one(
            metrics, "prometheus_target_scrapes_sample_duplicate_timestamp_total"
        ),
        "rules": [
            {"group": g, "seconds": seconds.get(g, 0.0), "interval_s": i}
            for g, i in sorted(groups.items())
        ],
        "peak_rss_mb": stack.sampler.peaks.get(NAME, 0.0),
    }


def _scraped(url: str) -> int:
    found = m.query(url, 'count_over_time(up{job="federate"}[10m])')
    return int(float(found[0]["value"][1])) if found else 0


def _evaluated(url: str, groups: dict[str, float]) -> bool:
    seconds = m.rule_group_seconds(m.scrape_metrics(url))
    return all(seconds.get(g, 0.0) > 0 for g in groups)
