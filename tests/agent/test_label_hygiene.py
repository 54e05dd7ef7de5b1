"""Label hygiene for big backends: few labels per series, bounded label values, and the
per-node series budget docs/metrics.md states.

Every profile is rendered as `serve` would export it; the target labels are the ones the
shipped deploy files add (the file_sd groups `nvwatch inventory` writes, the scrape job
and Prometheus' external labels, which remote write and federation attach), so a label
added on either side is counted.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from nvwatch.agent.catalogue import CATALOGUE
from nvwatch.agent.inventory import file_sd_by_class, load_inventory
from nvwatch.agent.sources.infiniband import InfinibandSource
from nvwatch.agent.sources.nvml.processes import MAX_PROCESSES
from nvwatch.sim.node.process_file import ProcessFile
from nvwatch.sim.profiles import PROFILES
from nvwatch.sim.series_budget import (
    PROCESS_FAMILIES,
    PROCESS_FAMILY,
    measure,
    parse_series,
    render_profile,
)
from tests.infiniband.exposition import scrape
from tests.infiniband.sysfs_tree import add_device, healthy_port

REPO = Path(__file__).resolve().parents[2]
MAX_LABELS = 15  # besides the metric name; VictoriaMetrics and Thanos users ask for this
# label names whose values grow without bound: a series per process, per instant, per text
UNBOUNDED_NAMES = {"pid", "timestamp", "time", "ts", "message", "msg", "cmdline", "command"}
# a value that is a Unix time, or a sentence
_TIMESTAMP = re.compile(r"^1[5-9]\d{8}(\.\d+)?$")


# what prometheus-operator's generated scrape config sets on every ServiceMonitor target
# before the ServiceMonitor's own relabelings run
OPERATOR_TARGET_LABELS = {"job", "instance", "namespace", "service", "pod", "container", "endpoint"}


def prometheus_target_labels() -> set[str]:
    """What deploy/prometheus and deploy/inventory add to every series of a target."""
    nodes = load_inventory(REPO / "deploy" / "inventory" / "cluster.example.csv")
    groups = [g for groups in file_sd_by_class(nodes, 9477).values() for g in groups]
    from_inventory = set().union(*(g["labels"] for g in groups))
    prometheus = yaml.safe_load((REPO / "deploy" / "prometheus" / "prometheus.yml").read_text())
    external = set(prometheus["global"].get("external_labels", {}))
    return from_inventory | {"job", "instance"} | external


def kubernetes_target_labels() -> set[str]:
    """What deploy/kubernetes/servicemonitor.yaml leaves on every series of a target."""
    monitor = yaml.safe_load((REPO / "deploy" / "kubernetes" / "servicemonitor.yaml").read_text())
    labels = set(OPERATOR_TARGET_LABELS)
    for endpoint in monitor["spec"]["endpoints"]:
        for step in endpoint.get("relabelings", []):
            action = step.get("action", "replace").lower()
            if action == "replace":
                labels.add(step["targetLabel"])
            elif action == "labeldrop":
                labels = {x for x in labels if not re.fullmatch(step["regex"], x)}
    return labels


def target_labels() -> set[str]:
    """The larger of the two deploy paths' target label sets (each is checked)."""
    return max(prometheus_target_labels(), kubernetes_target_labels(), key=len)


def _count(own: set[str] | tuple[str, ...], targets: set[str]) -> int:
    """Labels of a stored series: a clash (the process family's `job`) keeps both, as
    Prometheus renames the exported one to `exported_job` (honor_labels is off)."""
    return len(own) + len(targets)


def test_target_labels_are_the_deploy_files() -> None:
    assert prometheus_target_labels() >= {"job", "instance", "cluster", "rack", "node_class"}
    assert kubernetes_target_labels() >= {"job", "instance", "cluster", "node_class"}
    # the rollout-churning pod label is dropped
    assert "pod" not in kubernetes_target_labels()


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_no_rendered_series_carries_more_than_15_labels(profile: str, tmp_path: Path) -> None:
    targets = target_labels()
    for series in parse_series(render_profile(profile, tmp_path, with_host=True)):
        n = _count(set(series.labels), targets)
        assert n <= MAX_LABELS, f"{series.name}{series.labels}: {n} labels with the target's"


@pytest.mark.parametrize("targets", [prometheus_target_labels, kubernetes_target_labels])
def test_no_catalogue_family_can_carry_more_than_15_labels(
    targets: Callable[[], set[str]],
) -> None:
    """The same bound for families no simulated profile renders (attribution, MIG)."""
    for spec in CATALOGUE:
        assert _count(spec.labels, targets()) <= MAX_LABELS, spec.name


def test_only_the_capped_process_families_carry_an_unbounded_label_name() -> None:
    carriers = {spec.name for spec in CATALOGUE if UNBOUNDED_NAMES & set(spec.labels)}
    assert carriers <= set(PROCESS_FAMILIES)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_label_values_are_bounded(profile: str, tmp_path: Path) -> None:
    """No time stamps or sentences in label values; descriptive text only on info
    families, and those hold one series per GPU, link, HCA or port."""
    text = render_profile(profile, tmp_path, with_host=True)
    series = parse_series(text)
    for s in series:
        for name, value in s.labels.items():
            assert not _TIMESTAMP.match(value), f"{s.name}: {name}={value} looks like a time"
            if not s.name.endswith("_info"):
                assert len(value) <= 64 and "  " not in value, f"{s.name}: {name}={value!r}"
    info_per_entity = Counter(
        (s.name, *(s.labels.get(k) for k in ("gpu", "link", "device", "port")))
        for s in series
        if s.name.endswith("_info")
    )
    assert set(info_per_entity.values()) <= {1}, "an info family repeats an entity"


def test_process_family_is_capped_per_gpu(tmp_path: Path) -> None:
    """More processes on a GPU than the cap: only the MAX_PROCESSES largest are series."""
    extra = MAX_PROCESSES + 4
    lines = [f"0 {100_000 + i} {64 * (i + 1)}" for i in range(extra)]
    path = tmp_path / "processes"
    path.write_text("\n".join(lines) + "\n")
    # pids the test makes up: "running" is the file's own check, answered here
    claims = ProcessFile(path, 8, running=lambda _pid: True)
    root = tmp_path / "sys"
    root.mkdir()
    series = parse_series(render_profile("dgx1-v100", root, process_file=claims))
    on_gpu0 = [s for s in series if s.name == PROCESS_FAMILY and s.labels["gpu"] == "0"]
    assert len(on_gpu0) == MAX_PROCESSES
    kept = {int(s.labels["pid"]) for s in on_gpu0}
    # the utilization families carry the same processes, no more
    for family in PROCESS_FAMILIES:
        pids = {int(s.labels["pid"]) for s in series if s.name == family and s.labels["gpu"] == "0"}
        assert pids == kept, family
    # the simulated job's worker holds GBs: it and the largest listed processes stay
    largest = {100_000 + i for i in range(extra - MAX_PROCESSES + 1, extra)}
    assert largest <= kept


def test_ceiling_is_reached_with_every_gpu_at_the_process_cap(tmp_path: Path) -> None:
    """The budget's ceiling is a measurement too: a node with more processes than the
    cap on every GPU exports exactly that many series (in each process family: the
    listed processes without samples are idle, 0, not absent)."""
    gpus = PROFILES["dgx1-v100"].gpu_count
    lines = [
        f"{gpu} {100_000 + gpu * 100 + i} 64" for gpu in range(gpus) for i in range(MAX_PROCESSES)
    ]
    path = tmp_path / "processes"
    path.write_text("\n".join(lines) + "\n")
    claims = ProcessFile(path, gpus, running=lambda _pid: True)
    root = tmp_path / "sys"
    root.mkdir()
    full = parse_series(render_profile("dgx1-v100", root, with_host=True, process_file=claims))
    budget_root = tmp_path / "budget"
    budget_root.mkdir()
    budget = measure("dgx1-v100", budget_root)
    # a healthy fabric pins no IB counter; the ceiling has every port's flags pinned,
    # which _pinned_flags_per_port measures on a real sysfs tree
    ports = sum(1 for s in full if s.name == "nvwatch_ib_port_state")
    assert not [s for s in full if s.name == "nvwatch_ib_port_reading_saturated"]
    assert len(full) + ports * _pinned_flags_per_port(tmp_path / "pinned") == budget.ceiling


# Widths of the PortCounters fields an HCA counts (IBA vol 1, 16.1.3.5), written out
# from the spec: every one of them pinned at all-ones.
_IBA_HCA_COUNTER_BITS = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_xmit_discards": 16,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "VL15_dropped": 16,
    "port_xmit_wait": 32,
}


def _pinned_flags_per_port(root: Path) -> int:
    """Flag series of one port whose every narrow counter sits at its maximum."""
    pinned = {
        f"counters/{name}": f"{(1 << bits) - 1}\n" for name, bits in _IBA_HCA_COUNTER_BITS.items()
    }
    add_device(root, "mlx5_0", ports={"1": healthy_port(**pinned)})
    _, samples = scrape(InfinibandSource(root).collect())
    return sum(1 for name, _ in samples if name == "nvwatch_ib_port_reading_saturated")


def test_a_port_with_every_counter_pinned_flags_each(tmp_path: Path) -> None:
    assert _pinned_flags_per_port(tmp_path) == len(_IBA_HCA_COUNTER_BITS)
