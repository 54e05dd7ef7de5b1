from __future__ import annotations

from pathlib import Path

from nvwatch.agent.catalogue import CATALOGUE
from nvwatch.sim.metrics_doc import render

DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_metrics_doc_is_generated_from_the_catalogue() -> None:
    assert DOC.read_text() == render(), (
        "docs/metrics.md is out of date: run `python -m nvwatch.sim.metrics_doc > docs/metrics.md`"
    )


def test_every_metric_is_documented_once() -> None:
    text = render()
    for spec in CATALOGUE:
        assert text.count(f"### `{spec.name}`\n") == 1, spec.name
        assert spec.origin in text, spec.name
