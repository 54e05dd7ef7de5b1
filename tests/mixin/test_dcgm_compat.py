"""The dcgm-exporter table: complete against dcgm-exporter's own list, units consistent,
every compatibility series tested by promtool (promtool/dcgm_compat.yaml holds the
values, worked out by hand)."""

from __future__ import annotations

import re
import subprocess

import pytest
import yaml

from nvwatch.agent.catalogue import BY_NAME
from nvwatch.agent.config import ATTRIBUTION_MODES
from nvwatch.agent.sources.attribution import kubernetes as kubernetes_attribution
from nvwatch.alerts.build import build_all
from nvwatch.alerts.dcgm_compat import (
    ALLOCATION,
    FIELDS,
    KUBERNETES,
    LABELS_RULE,
    MIB,
    DcgmField,
    labels,
    pod_labels,
)
from nvwatch.alerts.dcgm_doc import RULE_FILE, render_doc
from nvwatch.alerts.promql import metric_names
from nvwatch.mixin.config import MixinConfig
from tests.mixin.conftest import REPO

# The uncommented lines of dcgm-exporter's etc/default-counters.csv (NVIDIA/dcgm-exporter,
# main, 2026-05): the fields a stock dcgm-exporter exports. DCGM_FI_DRIVER_VERSION is a
# label there ("label" type), not a series.
DCGM_EXPORTER_DEFAULTS = [
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_MEM_CLOCK",
    "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL",
    "DCGM_FI_DEV_DEC_UTIL",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE",
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "DCGM_FI_PROF_DRAM_ACTIVE",
    "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
]

# dcgm-exporter's unit -> (nvwatch's unit, the factor between them): units follow from
# the names, the factors from the SI prefixes, independently of the table.
CONVERSIONS = {
    "MHz": ("hertz", 1e-6),
    "MiB": ("bytes", 1 / MIB),
    "%": ("ratio", 100.0),
    "mJ": ("joules", 1e3),
    "ns": ("seconds", 1e9),
    "°C": ("celsius", 1.0),
    "W": ("watts", 1.0),
    "B/s": ("bytes_per_second", 1.0),
    "ratio": ("ratio", 1.0),
    "count": ("", 1.0),
    "rows": ("", 1.0),
    "pages": ("", 1.0),
    "1/0": ("", 1.0),
}


def _compat_rules(cfg: MixinConfig) -> list[dict[str, str]]:
    rules: list[dict[str, str]] = yaml.safe_load(build_all(cfg)[RULE_FILE])["groups"][0]["rules"]
    return rules


def test_every_default_dcgm_exporter_field_is_in_the_table() -> None:
    defaults = {f.name for f in FIELDS if f.default}
    assert defaults == set(DCGM_EXPORTER_DEFAULTS)
    assert "DCGM_FI_DRIVER_VERSION" in {lb.name for lb in labels(MixinConfig())}
    assert len({f.name for f in FIELDS}) == len(FIELDS)


@pytest.mark.parametrize("field", FIELDS, ids=lambda f: f.name)
def test_units_convert_from_nvwatch_to_dcgm(field: DcgmField) -> None:
    if not field.has_equivalent:
        assert field.note, f"{field.name}: say why there is no equivalent"
        return
    nvwatch_unit, factor = CONVERSIONS[field.unit]
    spec = BY_NAME[field.metric]
    assert spec.unit == nvwatch_unit, f"{field.metric} is in {spec.unit or 'no unit'}"
    assert field.scale == pytest.approx(factor, rel=1e-12)
    for matcher in field.select:
        label = matcher.split("=", 1)[0]
        assert label in spec.labels, f"{field.metric} has no label {label}"


def test_compat_rules_read_only_nvwatch_series(cfg: MixinConfig) -> None:
    allowed = set(BY_NAME) | {LABELS_RULE}
    for rule in _compat_rules(cfg):
        assert metric_names(rule["expr"]) <= allowed, rule["record"]
        assert cfg.job_selector in rule["expr"] or LABELS_RULE in rule["expr"], rule["record"]


def test_every_compat_series_has_a_promtool_value_test(cfg: MixinConfig) -> None:
    path = REPO / "tests" / "mixin" / "promtool" / "dcgm_compat.yaml"
    tests = yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]
    exprs = {case["expr"].split("{")[0] for t in tests for case in t["promql_expr_test"]}
    records = {r["record"] for r in _compat_rules(cfg)}
    assert records - exprs == set()
    assert records == {f.name for f in FIELDS if f.has_equivalent} | {LABELS_RULE}


def test_promtool_accepts_the_compat_rules(promtool: str, cfg: MixinConfig) -> None:
    path = REPO / "alerts" / "generated" / RULE_FILE
    result = subprocess.run(
        [promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{len(_compat_rules(cfg))} rules found" in result.stdout


def test_the_guide_lists_every_field_and_says_which_have_no_equivalent(cfg: MixinConfig) -> None:
    text = render_doc(cfg)
    missing_section = text.split("## Fields nvwatch has no equivalent for", 1)[1].split("##")[0]
    for field in FIELDS:
        assert f"| `{field.name}` |" in text
        assert (f"`{field.name}`" in missing_section) is not field.has_equivalent, field.name
    for label in labels(cfg):
        assert f"| `{label.name}` |" in text


def test_every_mapped_label_exists_in_nvwatch(cfg: MixinConfig) -> None:
    exported = {label for spec in BY_NAME.values() for label in spec.labels}
    for label in labels(cfg):
        if label.nvwatch and label.nvwatch != cfg.instance_label:  # a target label
            assert label.nvwatch in exported, f"{label.name}: no nvwatch label {label.nvwatch}"
    on_compat = set(yaml.safe_load(build_all(cfg)[RULE_FILE])["groups"][0]["rules"][1]["expr"]
                    .split("group_left (", 1)[1].split(")", 1)[0].split(", "))  # fmt: skip
    assert on_compat == {lb.name for lb in labels(cfg) if lb.nvwatch and lb.per_gpu} - {"gpu"}


def test_pod_labels_are_the_allocation_series_of_kubernetes_attribution(cfg: MixinConfig) -> None:
    """The guide's pod row comes from the table the code uses: the catalogue's labels of
    the allocation series, the --attribution modes, and the scheduler the Kubernetes
    attribution writes."""
    pods = [lb for lb in labels(cfg) if lb.series]
    assert [lb.name for lb in pods] == list(pod_labels(cfg)) == ["pod", "namespace", "container"]
    for lb in pods:
        assert lb.series == ALLOCATION and lb.nvwatch in BY_NAME[ALLOCATION].labels
        assert lb.attribution == KUBERNETES and not lb.per_gpu
    assert KUBERNETES in ATTRIBUTION_MODES
    assert KUBERNETES == kubernetes_attribution.SCHEDULER
    text = render_doc(cfg)
    assert "no nvwatch equivalent" not in text.split("## Labels", 1)[1].split("## Compat")[0]


def test_the_guides_per_pod_query_is_the_one_promtool_evaluates(cfg: MixinConfig) -> None:
    text = render_doc(cfg)
    section = text.split("### Kubernetes pods", 1)[1]
    (query,) = re.findall(r"```promql\n(.*?)```", section.split("##", 1)[0], flags=re.DOTALL)
    path = REPO / "tests" / "mixin" / "promtool" / "dcgm_compat.yaml"
    tested = {
        " ".join(case["expr"].split())
        for test in yaml.safe_load(path.read_text(encoding="utf-8"))["tests"]
        for case in test["promql_expr_test"]
    }
    assert " ".join(query.split()) in tested
