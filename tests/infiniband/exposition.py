"""Render an InfinibandSample the way the agent does and parse the text back."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from nvwatch.agent.exposition.families import FamilySet
from nvwatch.agent.exposition.infiniband import render
from nvwatch.agent.exposition.render import registry_of
from nvwatch.agent.sources.infiniband import InfinibandSample

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
