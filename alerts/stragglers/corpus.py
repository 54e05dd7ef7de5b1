"""A labelled straggler corpus on disk, as `nvwatch simulate stragglers` writes it and
`nvwatch alerts evaluate-stragglers` reads it: every episode's series in one OpenMetrics
file, and the truth of each episode beside it."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvwatch.alerts.stragglers.server import EvaluationError

SERIES_FILE = "corpus.om"
TRUTH_FILE = "truth.json"
TRUTH_FORMAT = "nvwatch-straggler-corpus/1"
# what every episode of the truth names; scoring reads these
EPISODE_KEYS = ("job_id", "kind", "start", "end", "alert_expected", "culprit", "cause")


@dataclass(frozen=True)
class Corpus:
    directory: Path
    truth: dict[str, Any]

    @property
    def series(self) -> Path:
        return self.directory / SERIES_FILE

    @property
    def step(self) -> float:
        return float(self.truth["step_seconds"])

    @property
    def start(self) -> float:
        return float(self.truth["start"])

    @property
    def end(self) -> float:
        return float(self.truth["end"])

    @property
    def episodes(self) -> list[dict[str, Any]]:
        return list(self.truth["episodes"])

    def site_markers(self) -> dict[str, str]:
        """The mixin settings that mark the corpus's pipeline-parallel jobs as a site would."""
        markers: dict[str, str] = {}
        for settings in self.truth.get("site_markers", {}).values():
            markers.update(settings)
        return markers


def load_corpus(directory: Path) -> Corpus:
    """The corpus in `directory`; EvaluationError naming what is missing or malformed."""
    truth_path = directory / TRUTH_FILE
    if not (directory / SERIES_FILE).is_file() or not truth_path.is_file():
        raise EvaluationError(
            f"{directory}: not a straggler corpus (no {SERIES_FILE} and {TRUTH_FILE}; "
            "write one with `nvwatch simulate stragglers`)"
        )
    try:
        truth = json.loads(truth_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise EvaluationError(f"{truth_path}: not readable JSON: {exc}") from exc
    if not isinstance(truth, dict) or truth.get("format") != TRUTH_FORMAT:
        raise EvaluationError(f"{truth_path}: not of format {TRUTH_FORMAT}")
    try:
        corpus = Corpus(directory, truth)
        episodes = corpus.episodes
        missing = [k for e in episodes for k in EPISODE_KEYS if k not in e]
        float(corpus.step), float(corpus.start), float(corpus.end)
    except (KeyError, TypeError, ValueError) as exc:
        raise EvaluationError(f"{truth_path}: malformed: {exc}") from exc
    if missing or not episodes:
        raise EvaluationError(f"{truth_path}: malformed: an episode without {missing[:1]}")
    return corpus
