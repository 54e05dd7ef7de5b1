"""The runbooks ship in the repository and every alert can be acted on without them.

Each rule file an operator deploys links every alert to a runbook that exists in
docs/runbooks/, every link between the docs resolves, and every alert's description
carries the runbook's action, for a notification read where no link opens.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from nvwatch.alerts.render import grafana_alerts, prometheus_alerts
from nvwatch.alerts.rules import Alert, all_alerts
from nvwatch.mixin.config import RUNBOOK_DIR, MixinConfig

REPO = Path(__file__).resolve().parents[2]
RUNBOOKS = REPO / RUNBOOK_DIR
# every rule file the repository ships, in the forms Prometheus, vmalert, Grafana and
# prometheus-operator read
RULE_FILES = [
    "alerts/generated/nvwatch-alerts.yaml",
    "alerts/generated/nvwatch-alerts-vmalert.yaml",
    "alerts/generated/grafana-alerts.yaml",
    "alerts/generated/grafana-alerts.json",
    "deploy/kubernetes/nvwatch-rules.yaml",
]
# a Markdown link whose target is no URL: [text](target)
# what sends the reader elsewhere
POINTER = re.compile(r"\bsee\b|\brunbook\b|\b(table|section|list|steps) (below|above)\b", re.I)
LOCAL_LINK = re.compile(r"\]\((?!https?://|mailto:)([^)\s]+)\)")


def _rules(doc: Any) -> list[dict[str, Any]]:
    """The alerting rules of a rule file, a Grafana provisioning file or a PrometheusRule."""
    if isinstance(doc, dict) and doc.get("kind") == "PrometheusRule":
        doc = doc["spec"]
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r or "title" in r]


def _load(name: str) -> list[dict[str, Any]]:
    text = (REPO / name).read_text(encoding="utf-8")
    docs = [json.loads(text)] if name.endswith(".json") else list(yaml.safe_load_all(text))
    return [r for doc in docs if doc for r in _rules(doc)]


def _alerts() -> list[Alert]:
    return list(all_alerts(MixinConfig().with_overrides(production=True)))


@pytest.mark.parametrize("name", RULE_FILES)
def test_every_runbook_url_of_a_shipped_rule_file_is_a_runbook_in_the_repository(
    name: str,
) -> None:
    rules = _load(name)
    assert len(rules) >= 30, name
    for rule in rules:
        alert = rule.get("alert") or rule["title"]
        url = rule["annotations"]["runbook_url"]
        assert url == f"{RUNBOOK_DIR}/{alert}.md", (name, alert, url)
        path = REPO / url
        assert path.is_file(), f"{name}: {alert}'s runbook_url {url} names no file"
        assert path.read_text(encoding="utf-8").startswith(f"# {alert}\n"), path


def test_there_is_one_runbook_per_alert_and_no_other() -> None:
    assert sorted(p.name for p in RUNBOOKS.iterdir()) == sorted(f"{a.name}.md" for a in _alerts())


@pytest.mark.parametrize(
    "doc",
    [REPO / "docs" / "alerts.md", *sorted(RUNBOOKS.glob("*.md"))],
    ids=lambda p: p.name,
)
def test_every_local_link_of_the_alert_docs_resolves(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    for target in LOCAL_LINK.findall(text):
        path, _, anchor = target.partition("#")
        resolved = (doc.parent / path).resolve() if path else doc
        assert resolved.exists(), f"{doc.relative_to(REPO)}: link to {target} resolves nowhere"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", resolved.read_text(encoding="utf-8"), re.M)
            slugs = {re.sub(r"[^a-z0-9 -]", "", h.lower()).replace(" ", "-") for h in headings}
            assert anchor in slugs, f"{doc.relative_to(REPO)}: no heading for #{anchor}"


def test_every_alert_description_says_what_to_do() -> None:
    """The action is the runbook's own, complete: no pointer to a table or section the
    notification does not carry."""
    cfg = MixinConfig().with_overrides(production=True)
    rules = {r["alert"]: r for g in prometheus_alerts(cfg)["groups"] for r in g["rules"]}
    grafana = {r["title"]: r for g in grafana_alerts(cfg)["groups"] for r in g["rules"]}
    for alert in _alerts():
        action = alert.runbook.action
        assert len(action) >= 40 and action.endswith("."), alert.name
        assert not POINTER.search(action), (alert.name, action)
        for notes in (rules[alert.name]["annotations"], grafana[alert.name]["annotations"]):
            assert notes["summary"] == alert.summary
            assert notes["description"].endswith(f" Action: {action}"), alert.name
            assert "$labels." in notes["description"], alert.name


def test_a_published_runbook_folder_makes_every_link_absolute() -> None:
    base = "https://git.example.org/gpu-ops/nvwatch/-/blob/main/docs/runbooks/"
    cfg = MixinConfig().with_overrides(runbook_base_url=base)
    for group in prometheus_alerts(cfg)["groups"]:
        for rule in group["rules"]:
            assert rule["annotations"]["runbook_url"] == f"{base}{rule['alert']}.md"


@pytest.mark.parametrize(
    "url",
    [
        # the old form: one page with an anchor per alert
        "https://git.example.org/nvwatch/blob/main/docs/alerts.md",
        "docs/alerts.md#",
        "",
    ],
)
def test_a_runbook_base_url_that_is_no_folder_is_one_line(url: str, tmp_path: Path) -> None:
    config = tmp_path / "mixin.yaml"
    config.write_text(yaml.safe_dump({"runbook_base_url": url}), encoding="utf-8")
    with pytest.raises(ValueError, match=r"runbook_base_url: expected the folder") as err:
        MixinConfig.from_yaml(config)
    assert "\n" not in str(err.value)
