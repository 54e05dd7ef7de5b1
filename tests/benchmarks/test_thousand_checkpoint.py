"""A 1,000-node run takes hours: stopped in the second engine's turn (a session's end,
a kill), its --json still holds what the first engine measured. And which engines
report over the month."""

from __future__ import annotations

import json
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import benchmarks.thousand.run as thousand
from benchmarks.thousand.replay import ReplayProcess


class _Server:
    closed = False

    def close(self) -> None:
        self.closed = True


def _without_history(monkeypatch: pytest.MonkeyPatch) -> _Server:
    """The run with no history written, no targets started and no rules built: only its
    engines' turns (each test's own) and what it does around them; the targets' server."""
    server = _Server()
    monkeypatch.setattr(thousand, "writing_seconds", lambda *args: 0.0)
    monkeypatch.setattr(thousand, "generate", lambda plan, data: (None, {"series": 7}))
    monkeypatch.setattr(thousand, "start_replay", lambda plan, result, work: (server, None))
    monkeypatch.setattr(thousand, "rules", lambda work, interval: work / "rules")
    return server


def test_a_run_stopped_in_the_second_engine_keeps_the_first_engine_s_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    server = _without_history(monkeypatch)

    def prometheus(*args: Any) -> dict[str, Any]:
        return {"rules": [{"group": "nvwatch-node.rules", "seconds": 0.5}]}

    def victoria_metrics(*args: Any) -> dict[str, Any]:
        # what SIGTERM becomes in the run (main's handler): not an engine's failure
        raise KeyboardInterrupt

    monkeypatch.setattr(thousand, "measure_prometheus", prometheus)
    monkeypatch.setattr(thousand, "measure_victoria_metrics", victoria_metrics)
    figures = tmp_path / "figures.json"
    argv = ["--nodes", "2", "--hours", "0.1", "--workdir", str(tmp_path)]
    assert thousand.main([*argv, "--json", str(figures)]) == 130
    said = capsys.readouterr().out.strip().splitlines()
    assert said == [
        "thousand: stopped; its processes are stopped and its scratch removed; "
        f"the finished engines' figures are in {figures}"
    ]
    kept = json.loads(figures.read_text())
    assert kept["engines"] == {"prometheus": prometheus()}
    assert kept["generation"]["series"] == 7 and kept["nodes"] == 2
    # the stopped run still cleaned up after itself
    assert server.closed
    assert [p.name for p in tmp_path.iterdir()] == ["figures.json"]


@pytest.mark.parametrize(
    ("option", "missing"),
    [("--workdir", "scratch"), ("--json", "figures/figures.json"), ("--out", "scale.md")],
)
def test_a_missing_directory_is_one_line_before_the_run_starts(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    option: str,
    missing: str,
) -> None:
    def never(*args: Any) -> None:
        raise AssertionError("the run started")

    monkeypatch.setattr(thousand, "run", never)
    with pytest.raises(SystemExit) as stopped:
        thousand.main([option, str(tmp_path / missing)])
    assert stopped.value.code == 2
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"error: {option} {tmp_path / missing}" in error and "Traceback" not in error


def test_by_default_only_prometheus_reports_over_the_month(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The month of report rules' series stands in before the history for Prometheus
    alone: VictoriaMetrics' month is estimated from its shorter reports."""
    _without_history(monkeypatch)
    before: dict[str, float] = {}

    def measured(engine: str) -> Callable[..., dict[str, Any]]:
        def measure(*args: Any) -> dict[str, Any]:
            before[engine] = args[-1]  # how far before the history the month reaches
            return {}

        return measure

    monkeypatch.setattr(thousand, "measure_prometheus", measured("prometheus"))
    monkeypatch.setattr(thousand, "measure_victoria_metrics", measured("victoria-metrics"))
    figures = tmp_path / "figures.json"
    argv = ["--nodes", "2", "--hours", "24", "--workdir", str(tmp_path)]
    assert thousand.main([*argv, "--json", str(figures)]) == 0
    # 30 days and an hour before the end of a day's history: 29 days and an hour before it
    assert before == {"prometheus": (29 * 24 + 1) * 3600.0, "victoria-metrics": 0.0}
    assert json.loads(figures.read_text())["month_engines"] == ["prometheus"]
    # asked for, both
    assert thousand.main([*argv, "--month-engines", "prometheus,victoria-metrics"]) == 0
    assert before["victoria-metrics"] == before["prometheus"] > 0


def test_the_replaying_targets_stop_quietly_under_the_run_s_handlers(
    capfd: pytest.CaptureFixture[str],
) -> None:
    """The targets' process is forked from a run that makes SIGTERM a KeyboardInterrupt:
    stopped, it must end by the signal, not print that interrupt's traceback into the
    run's log."""
    before = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        targets = ReplayProcess({})
        targets.close()
    finally:
        signal.signal(signal.SIGTERM, before)
    assert targets.process.exitcode == -signal.SIGTERM
    assert "Traceback" not in capfd.readouterr().err
