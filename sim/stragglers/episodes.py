"""Planning a labelled straggler corpus: which episodes, and the truth of each.

An episode is one synchronous data-parallel job (sim/job/) on nodes of its own, over a
time range of its own that starts with the job. Its kind says what happens in it:

- a straggler: one rank slowed by one cause (`STRAGGLER_CAUSES`: a fault scenario with
  `slowdown=` drawn from 5 % to 60 %, in turn from each magnitude band), from an onset
  anywhere before the episode's last `OBSERVABLE_S`; an alert naming it is expected;
- legitimate imbalance, where no alert is expected: a healthy job, a rank slow only in
  the job's first minutes (warm-up), checkpoints that stop every rank together, a
  pipeline-parallel job whose stages differ by design (marked as a site would mark it:
  `PIPELINE_MARKER`), a single-GPU job with a slow GPU, and a job slowed everywhere
  (every GPU power-capped alike).

Kinds come in turns of one of each (shuffled per turn), so a small corpus holds every
cause and every legitimate case. Job sizes: 2 to `max_nodes` nodes, small ones far more
likely (P(n) proportional to 1/n^2), so a CI corpus stays cheap. Everything is drawn
from one `random.Random(seed)`: the same seed plans the same corpus.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from nvwatch.agent.config import ScenarioSpec
from nvwatch.sim.job.plan import rail
from nvwatch.sim.profiles import get_profile

# the corpus's first episode starts here (2024-01-01T00:00:00Z): a fixed time, so a seed
# gives the same files byte for byte
CORPUS_START = 1_704_067_200.0
GAP_S = 900.0  # between episodes: longer than any lookback, so none sees the last
MIN_EPISODE_S = 1800.0
MAX_EPISODE_S = 2700.0
# a straggler starts at least this long before its episode ends: past the rules' warm-up,
# it holds the job back long enough for a rate window and an alert's `for:`
OBSERVABLE_S = 1500.0
PROFILES = ("dgx-h100", "dgx-a100")  # with GPM (tensor activity), and without
MAGNITUDE_BANDS = ((0.05, 0.10), (0.10, 0.20), (0.20, 0.40), (0.40, 0.60))
FIRST_JOB_ID = 20001
NO_MAGNITUDE = 0.0

# fault scenario -> (the alert's cause label, what it names: a GPU, an IB port, a node)
STRAGGLER_CAUSES: dict[str, tuple[str, str]] = {
    "power-capped": ("power-capped", "gpu"),
    "thermal-runaway": ("thermal", "gpu"),
    "gpu-slow": ("clock-other", "gpu"),
    "nvlink-degraded": ("nvlink", "gpu"),
    "pcie-downtrained": ("pcie", "gpu"),
    "ib-congestion": ("infiniband", "port"),
    "ib-degraded": ("infiniband", "port"),
    "cpu-starved": ("host-cpu", "node"),
}
STRAGGLER = "straggler"
LEGITIMATE = ("healthy", "warmup", "checkpoint", "pipeline", "single-gpu", "slowed-everywhere")
# how a site marks its pipeline-parallel jobs: their Slurm account, which the agent's
# allocation info carries; the mixin's setting for it is the evaluator's to apply
PIPELINE_ACCOUNT = "pp-train"
PIPELINE_MARKER = f'account="{PIPELINE_ACCOUNT}"'
ACCOUNT = "ml"


@dataclass(frozen=True)
class Culprit:
    node: int  # index among the episode's nodes
    gpu: int | None = None
    device: str | None = None  # an IB port's HCA (port 1)


@dataclass(frozen=True)
class EpisodePlan:
    """One episode: its job, its nodes, what happens, and when (seconds from its start)."""

    number: int
    kind: str  # STRAGGLER or one of LEGITIMATE
    profile: str
    nodes: int
    seconds: float
    seed: int
    gpus: tuple[int, ...] | None = None  # None: every GPU of every node
    scenario: str | None = None
    slowdown: float | None = None
    onset_s: float | None = None
    until_s: float | None = None
    culprit: Culprit | None = None
    pauses: tuple[tuple[float, float], ...] = ()
    compute_weights: tuple[float, ...] = ()  # per node (a pipeline stage per node)

    @property
    def job_id(self) -> str:
        return str(FIRST_JOB_ID + self.number)

    @property
    def cause(self) -> str | None:
        if self.kind != STRAGGLER or self.scenario is None:
            return None
        return STRAGGLER_CAUSES[self.scenario][0]

    @property
    def alert_expected(self) -> bool:
        return self.kind == STRAGGLER

    @property
    def account(self) -> str:
        return PIPELINE_ACCOUNT if self.kind == "pipeline" else ACCOUNT

    def scenarios(self) -> list[tuple[int, ScenarioSpec]]:
        """(node index, scenario) of the episode's faults."""
        if self.scenario is None:
            return []
        spec = ScenarioSpec(self.scenario, None, self.onset_s, self.until_s, slowdown=self.slowdown)
        if self.kind == "slowed-everywhere":
            count = get_profile(self.profile).gpu_count
            return [
                (node, ScenarioSpec(spec.name, str(g), spec.from_s, slowdown=spec.slowdown))
                for node in range(self.nodes)
                for g in range(count)
            ]
        assert self.culprit is not None
        target = self.culprit.device if self.culprit.device else None
        if target is None and self.culprit.gpu is not None:
            target = str(self.culprit.gpu)
        placed = ScenarioSpec(spec.name, target, spec.from_s, spec.until_s, slowdown=spec.slowdown)
        return [(self.culprit.node, placed)]


def job_sizes(max_nodes: int) -> tuple[list[int], list[float]]:
    """Sizes 2..max_nodes and their weights, 1/n^2: a 2-node job is 4x a 4-node one."""
    sizes = list(range(2, max(2, max_nodes) + 1))
    return sizes, [1.0 / (n * n) for n in sizes]


def plan_corpus(
    seed: int, episodes: int, *, max_nodes: int = 32, step: float = 15.0
) -> list[EpisodePlan]:
    rng = random.Random(seed)
    turn = [*(STRAGGLER for _ in STRAGGLER_CAUSES), *LEGITIMATE]
    kinds: list[str] = []
    while len(kinds) < episodes:
        batch = list(turn)
        rng.shuffle(batch)
        kinds += batch
    causes = list(STRAGGLER_CAUSES)
    rng.shuffle(causes)
    made: list[EpisodePlan] = []
    bands = {scenario: rng.randrange(len(MAGNITUDE_BANDS)) for scenario in causes}
    for number, kind in enumerate(kinds[:episodes]):
        base = _base(rng, number, kind, max_nodes, step)
        if kind == STRAGGLER:
            scenario = causes[sum(1 for e in made if e.kind == STRAGGLER) % len(causes)]
            band = bands[scenario]
            bands[scenario] = (band + 1) % len(MAGNITUDE_BANDS)
            made.append(_straggler(rng, base, scenario, MAGNITUDE_BANDS[band], step))
        else:
            made.append(_legitimate(rng, base, kind, step))
    return made


def _base(rng: random.Random, number: int, kind: str, max_nodes: int, step: float) -> EpisodePlan:
    sizes, weights = job_sizes(max_nodes)
    nodes = 1 if kind == "single-gpu" else rng.choices(sizes, weights)[0]
    steps = round(rng.uniform(MIN_EPISODE_S, MAX_EPISODE_S) / step)
    return EpisodePlan(
        number, kind, rng.choice(PROFILES), nodes, steps * step, rng.randrange(1 << 30)
    )


def _onset(rng: random.Random, seconds: float) -> float:
    return float(round(rng.uniform(0.0, seconds - OBSERVABLE_S)))


def _straggler(
    rng: random.Random,
    base: EpisodePlan,
    scenario: str,
    band: tuple[float, float],
    step: float,
) -> EpisodePlan:
    profile = get_profile(base.profile)
    node, gpu = rng.randrange(base.nodes), rng.randrange(profile.gpu_count)
    target = STRAGGLER_CAUSES[scenario][1]
    culprit = Culprit(node, gpu if target == "gpu" else None)
    if target == "port":
        culprit = Culprit(node, None, rail(profile, gpu))
    slowdown = None if scenario == "ib-degraded" else round(rng.uniform(*band), 3)
    return _replace(
        base,
        scenario=scenario,
        slowdown=slowdown,
        onset_s=_onset(rng, base.seconds),
        culprit=culprit,
    )


def _legitimate(rng: random.Random, base: EpisodePlan, kind: str, step: float) -> EpisodePlan:
    gpus = get_profile(base.profile).gpu_count
    if kind == "warmup":  # one rank slow while the job loads and compiles
        culprit = Culprit(rng.randrange(base.nodes), rng.randrange(gpus))
        until = float(round(rng.uniform(180.0, 480.0)))
        slowdown = round(rng.uniform(0.2, 0.5), 3)
        return _replace(
            base, scenario="gpu-slow", slowdown=slowdown, onset_s=0.0, until_s=until,
            culprit=culprit,
        )  # fmt: skip
    if kind == "checkpoint":
        pauses = []
        for _ in range(rng.randint(1, 3)):
            begin = float(round(rng.uniform(300.0, base.seconds - 300.0)))
            pauses.append((begin, begin + round(rng.uniform(60.0, 120.0))))
        return _replace(base, pauses=tuple(sorted(pauses)))
    if kind == "pipeline":
        weights = [round(rng.uniform(0.75, 1.0), 3) for _ in range(base.nodes)]
        weights[rng.randrange(base.nodes)] = 1.0  # the heaviest stage sets the pace
        return _replace(base, compute_weights=tuple(weights))
    if kind == "single-gpu":
        gpu = rng.randrange(gpus)
        return _replace(
            base, gpus=(gpu,), scenario="gpu-slow", slowdown=round(rng.uniform(0.2, 0.5), 3),
            onset_s=_onset(rng, base.seconds), culprit=Culprit(0, gpu),
        )  # fmt: skip
    if kind == "slowed-everywhere":
        return _replace(
            base, scenario="power-capped", slowdown=round(rng.uniform(0.1, 0.4), 3),
            onset_s=_onset(rng, base.seconds),
        )  # fmt: skip
    return base  # healthy


def _replace(base: EpisodePlan, **changes: object) -> EpisodePlan:
    return dataclasses.replace(base, **changes)  # type: ignore[arg-type]
