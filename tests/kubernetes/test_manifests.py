"""deploy/kubernetes checked offline: Kubernetes kinds against the Kubernetes OpenAPI
schemas (kubernetes-validate), prometheus-operator kinds against the CRDs' own
openAPIV3Schema (vendored under crd/), the kustomization built by `kubectl kustomize`,
and the generated manifests holding exactly the rules and dashboards of the one build."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from nvwatch.alerts import build as alerts_build
from nvwatch.alerts import kubernetes as k8s
from nvwatch.dashboards import build as dashboards_build
from nvwatch.mixin.config import MixinConfig
from tests.conftest import require_tool

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "deploy" / "kubernetes"
CRD = Path(__file__).parent / "crd"
# the oldest Kubernetes minor still supported upstream when this was written, and the
# newest the validator knows: a field from either side of that range fails
KUBERNETES_VERSIONS = ("1.31.0", kubernetes_validate.latest_version())
CRD_SCHEMAS = {"PrometheusRule": "prometheusrules", "ServiceMonitor": "servicemonitors"}
MAX_APPLY_BYTES = 262_144  # client-side apply's last-applied annotation limit


def _documents() -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        if path.name != "kustomization.yaml":
            out.extend((path.name, doc) for doc in k8s.load_documents(path))
    return out


DOCUMENTS = _documents()


def test_every_manifest_file_is_in_the_kustomization() -> None:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    files = {p.name for p in MANIFESTS.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(files)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize(
    ("file", "doc"),
    [d for d in DOCUMENTS if d[1]["kind"] not in CRD_SCHEMAS],
    ids=lambda v: v if isinstance(v, str) else v["metadata"]["name"],
)
def test_kubernetes_kinds_validate(file: str, doc: dict[str, Any], version: str) -> None:
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        pytest.fail(f"{file}: {doc['kind']} {doc['metadata']['name']}: {exc.message}")


def _crd_schema(kind: str) -> dict[str, Any]:
    text = (CRD / f"{CRD_SCHEMAS[kind]}.schema.yaml").read_text(encoding="utf-8")
    schema: dict[str, Any] = yaml.safe_load(text)
    return schema


@pytest.mark.parametrize(
    ("file", "doc"),
    [d for d in DOCUMENTS if d[1]["kind"] in CRD_SCHEMAS],
    ids=lambda v: v if isinstance(v, str) else v["kind"],
)
def test_prometheus_operator_kinds_validate_against_their_crd(
    file: str, doc: dict[str, Any]
) -> None:
    assert doc["apiVersion"] == "monitoring.coreos.com/v1", file
    # OpenAPI v3 structural schemas are JSON Schema draft 4 plus x-kubernetes-* hints
    validator = jsonschema.Draft4Validator(_crd_schema(doc["kind"]))
    errors = [
        f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)
    ]
    assert not errors, f"{file}: " + "; ".join(errors[:5])


def test_the_crd_schema_rejects_what_the_operator_would() -> None:
    """The check above has teeth: a rule without expr and a bad duration both fail."""
    validator = jsonschema.Draft4Validator(_crd_schema("PrometheusRule"))
    rule = k8s.prometheus_rule(MixinConfig())
    rule["spec"]["groups"][0]["rules"][0].pop("expr")
    rule["spec"]["groups"][1]["interval"] = "1 minute"
    assert len(list(validator.iter_errors(rule))) == 2


def test_the_prometheus_rule_holds_the_generated_rule_files() -> None:
    (rule,) = [d for _, d in DOCUMENTS if d["kind"] == "PrometheusRule"]
    generated = REPO / "alerts" / "generated"
    groups = []
    for name in (alerts_build.PROMETHEUS_RECORDING, alerts_build.PROMETHEUS_ALERTS):
        groups += yaml.safe_load((generated / name).read_text(encoding="utf-8"))["groups"]
    assert rule["spec"]["groups"] == groups


def test_the_configmaps_hold_the_generated_dashboards() -> None:
    maps = [d for _, d in DOCUMENTS if d["kind"] == "ConfigMap"]
    generated = {p.name: p for p in (REPO / "dashboards" / "generated").glob("*.json")}
    seen = {}
    for cm in maps:
        assert cm["metadata"]["labels"][k8s.SIDECAR_LABEL] == "1"
        assert len(json.dumps(cm)) < MAX_APPLY_BYTES, cm["metadata"]["name"]
        ((file_name, text),) = cm["data"].items()
        seen[file_name] = json.loads(text)
    assert set(seen) == set(generated)
    for name, path in generated.items():
        assert seen[name] == json.loads(path.read_text(encoding="utf-8")), name


def test_the_build_writes_the_committed_manifests(tmp_path: Path) -> None:
    cfg = MixinConfig()
    for built in (
        alerts_build.write_kubernetes(tmp_path, cfg),
        dashboards_build.write_kubernetes(tmp_path, cfg),
    ):
        committed = MANIFESTS / built.name
        stale = (
            f"{committed.relative_to(REPO)} is out of date: run the alerts and dashboards builds"
        )
        assert committed.read_text(encoding="utf-8") == built.read_text(encoding="utf-8"), stale


def test_kubectl_kustomize_builds_every_resource() -> None:
    kubectl = require_tool("kubectl")
    result = subprocess.run(
        [kubectl, "kustomize", str(MANIFESTS)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    built = [d for d in yaml.safe_load_all(result.stdout) if d]
    key = sorted((d["kind"], d["metadata"]["name"]) for d in built)
    assert key == sorted((d["kind"], d["metadata"]["name"]) for _, d in DOCUMENTS)
