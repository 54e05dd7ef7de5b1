"""Write the generated rule files, docs/alerts.md and the runbooks in docs/runbooks/.

`nvwatch alerts build --out alerts/generated` is the command; `python -m nvwatch.alerts.build`
runs that same command (same options, same `build`), so the two cannot drift apart.
"""

from __future__ import annotations

import json
from pathlib import Path

from nvwatch.alerts.dcgm_compat import compat_rules
from nvwatch.alerts.dcgm_doc import DOC_NAME as DCGM_DOC
from nvwatch.alerts.dcgm_doc import RULE_FILE as DCGM_COMPAT
from nvwatch.alerts.dcgm_doc import render_doc as render_dcgm_doc
from nvwatch.alerts.docs import render_docs, render_runbooks
from nvwatch.alerts.global_view import global_recording
from nvwatch.alerts.render import (
    dump_yaml,
    grafana_alerts,
    prometheus_alerts,
    prometheus_recording,
    vmalert_alerts,
)
from nvwatch.mixin.config import RUNBOOK_DIR, MixinConfig

PROMETHEUS_ALERTS = "nvwatch-alerts.yaml"
PROMETHEUS_RECORDING = "nvwatch-recording.yaml"
GLOBAL_RECORDING = "nvwatch-global-recording.yaml"
VMALERT_ALERTS = "nvwatch-alerts-vmalert.yaml"
GRAFANA_ALERTS_YAML = "grafana-alerts.yaml"
GRAFANA_ALERTS_JSON = "grafana-alerts.json"
_ROOT = Path(__file__).resolve().parent.parent


def default_docs() -> Path | None:
    """docs/alerts.md of the source checkout nvwatch runs from.

    None when nvwatch is installed without one (a wheel puts `alerts/` in site-packages,
    where there is no docs/ to keep up to date).
    """
    return _ROOT / "docs" / "alerts.md" if (_ROOT / "pyproject.toml").is_file() else None


def build_all(config: MixinConfig) -> dict[str, str]:
    """File name -> contents of every generated rule file."""
    grafana = grafana_alerts(config)
    recording = prometheus_recording(config)
    return {
        PROMETHEUS_ALERTS: dump_yaml(prometheus_alerts(config)),
        PROMETHEUS_RECORDING: dump_yaml(recording),
        # for deploy/scale/prometheus-global.yml: the roll-ups over the federated series
        GLOBAL_RECORDING: dump_yaml(global_recording(recording)),
        # for vmalert < 1.90 (deploy/scale): the same alerts without keep_firing_for
        VMALERT_ALERTS: dump_yaml(vmalert_alerts(config)),
        GRAFANA_ALERTS_YAML: dump_yaml(grafana),
        GRAFANA_ALERTS_JSON: json.dumps(grafana, indent=2, ensure_ascii=False) + "\n",
        # optional: DCGM_FI_* series for dcgm-exporter's dashboards (docs/{DCGM_DOC})
        DCGM_COMPAT: dump_yaml(compat_rules(config)),
    }


def write(out_dir: Path, config: MixinConfig) -> list[Path]:
    """The rule files only, e.g. for a Prometheus that a test or a local stack starts."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in build_all(config).items():
        path = out_dir / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def runbook_dir(docs: Path) -> Path:
    """The runbooks' folder beside the index `docs` (docs/alerts.md -> docs/runbooks)."""
    return docs.with_name(Path(RUNBOOK_DIR).name)


def write_docs(path: Path, config: MixinConfig) -> list[Path]:
    """The runbook index at `path`, the runbooks in the folder beside it (a runbook of an
    alert that no longer exists is removed), and the dcgm-exporter migration guide."""
    path.write_text(render_docs(config), encoding="utf-8")
    runbooks = runbook_dir(path)
    runbooks.mkdir(exist_ok=True)
    texts = render_runbooks(config)
    for stale in runbooks.glob("*.md"):
        if stale.name not in texts:
            stale.unlink()
    for name, text in texts.items():
        (runbooks / name).write_text(text, encoding="utf-8")
    guide = path.with_name(DCGM_DOC)
    guide.write_text(render_dcgm_doc(config), encoding="utf-8")
    return [path, runbooks, guide]


def write_kubernetes(out_dir: Path, config: MixinConfig) -> Path:
    """The prometheus-operator PrometheusRule holding the same rule groups."""
    from nvwatch.alerts.kubernetes import RULES_FILE, rules_text

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / RULES_FILE
    path.write_text(rules_text(config), encoding="utf-8")
    return path


def build(
    out_dir: Path, config: MixinConfig, docs: Path | None, kubernetes: Path | None = None
) -> list[Path]:
    """What `nvwatch alerts build` writes: the rule files, the runbooks (with the
    dcgm-exporter migration guide beside them) unless `docs` is None, and the
    PrometheusRule manifest into `kubernetes` unless it is None."""
    written = write(out_dir, config)
    if docs is not None:
        written += write_docs(docs, config)
    if kubernetes is not None:
        written.append(write_kubernetes(kubernetes, config))
    return written


def main(argv: list[str] | None = None) -> None:
    from nvwatch.mixin.commands import alerts_build

    alerts_build.main(args=argv, prog_name="python -m nvwatch.alerts.build")


if __name__ == "__main__":
    main()
