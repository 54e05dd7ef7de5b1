"""Each recorded run's NVML answers, replayed through the agent's NVML source: every
answer exported in base units (mW -> W, MHz -> Hz, KiB -> bytes, ns -> s, percent ->
ratio), every NotSupported answer absent (never 0), the same series the agent exported
live from those answers, and nvidia-smi's fields read beside them agreeing (static values
equal, instantaneous ones within the catalogue's tolerance)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.real_gpu.expectations import expected, judge, samples_of
from benchmarks.real_gpu.replay import Replay, recorded_exposition, replay
from tests.real_gpu.fixtures import CASES, case_id

# per-process series name the host's processes by pid; the recording's pids are gone
_VOLATILE = ("nvwatch_gpu_process_",)

pytestmark = pytest.mark.skipif(not CASES, reason="no recorded run under tests/real_gpu/")


@pytest.fixture(scope="module", params=CASES, ids=case_id)
def replayed(request: pytest.FixtureRequest) -> tuple[Path, str, Replay]:
    fixture, phase = request.param
    return fixture, phase, replay(fixture, phase)


def test_every_recorded_answer_is_exported_in_base_units(
    replayed: tuple[Path, str, Replay],
) -> None:
    _, _, result = replayed
    assert not result.misses, f"the agent asked what the tape lacks: {result.misses[:10]}"
    verdicts = judge(expected(result.calls), result.exposition)
    assert len(verdicts) > 50, "too few readings on the tape to judge"
    failing = [v.line() for v in verdicts if not v.ok]
    assert not failing, "\n".join(failing)


def test_not_supported_answers_are_absent_never_zero(replayed: tuple[Path, str, Replay]) -> None:
    _, _, result = replayed
    verdicts = [v for v in judge(expected(result.calls), result.exposition)]
    absent = [v for v in verdicts if v.expectation.value is None]
    assert absent, "a data-centre board answers some reading NotSupported (fan, retired pages)"
    exported = [v.line() for v in absent if not v.ok]
    assert not exported, "\n".join(exported)


def test_the_replay_exports_what_the_agent_exported_live(
    replayed: tuple[Path, str, Replay],
) -> None:
    """The same answers give the same series: the replay is faithful, and a change in how
    the agent reads NVML shows up here (re-import the run if the change is intended)."""
    fixture, phase, result = replayed
    live = _stable(samples_of(recorded_exposition(fixture, phase)))
    now = _stable(samples_of(result.exposition))
    changed = sorted(
        f"{key}: live {live.get(key)}, now {now.get(key)}"
        for key in live.keys() | now.keys()
        if live.get(key) != now.get(key)
    )
    assert not changed, "\n".join(changed[:40])


def test_nvidia_smi_fields_agree_with_the_replayed_series(
    replayed: tuple[Path, str, Replay],
) -> None:
    from nvwatch.agent.nvsmi_compare import compare

    fixture, phase, result = replayed
    csv = fixture / f"nvidia-smi-{phase}.csv"
    if not csv.exists():
        pytest.skip("this run had no nvidia-smi (a simulated run): nothing to compare")
    rows = compare(result.exposition, csv.read_text())
    assert rows
    failing = [
        f"GPU {r.gpu} {r.query}: {r.nvidia_smi} vs {r.nvwatch} {r.note}" for r in rows if not r.ok
    ]
    assert not failing, "\n".join(failing)


def _stable(samples: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> dict[str, float]:
    return {
        f"{name}{sorted(labels)}": value
        for (name, labels), value in samples.items()
        if not name.startswith(_VOLATILE)
    }
