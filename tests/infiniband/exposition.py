"""Render an InfinibandSample the way the agent does and parse the text back."""

from __future__ import annotations

from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nvwatch.agent.exposition.families import FamilySet
from nvwatch.agent.exposition.infiniband import render
from nvwatch.agent.exposition.render import build_exposition, prepare, registry_of
from nvwatch.agent.poller import Poller
from nvwatch.agent.sources.infiniband import InfinibandSample, InfinibandSource

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(sample: InfinibandSample) -> tuple[str, Samples]:
    """The text exposition of `sample`, and its samples by (name, labels)."""
    families = FamilySet()
    render(sample, families)
    text = generate_latest(registry_of(families)).decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return text, samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    """The sample's value, or None when the exposition has no such series."""
    return samples.get((name, frozenset(labels.items())))


def agent_samples(sysfs_root: Path) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """What the agent exports for the tree at `sysfs_root` on its second poll (the
    first relists the devices), with its own series, by (name, sorted labels)."""
    poller = Poller([InfinibandSource(sysfs_root)], interval=60, timeout=5, prepare=prepare)
    try:
        poller.poll_once()
        text = build_exposition(poller.poll_once()).text.decode()
    finally:
        poller.stop()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
