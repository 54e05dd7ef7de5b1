"""Write the generated rule files: `python -m alerts.build --out alerts/generated`."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from alerts.docs import render_docs
from alerts.render import dump_yaml, grafana_alerts, prometheus_alerts, prometheus_recording
from mixin.config import MixinConfig, load

PROMETHEUS_ALERTS = "nvwatch-alerts.yaml"
PROMETHEUS_RECORDING = "nvwatch-recording.yaml"
GRAFANA_ALERTS_YAML = "grafana-alerts.yaml"
GRAFANA_ALERTS_JSON = "grafana-alerts.json"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "alerts.md"


def build_all(config: MixinConfig) -> dict[str, str]:
    """File name -> contents of every generated rule file."""
    grafana = grafana_alerts(config)
    return {
        PROMETHEUS_ALERTS: dump_yaml(prometheus_alerts(config)),
        PROMETHEUS_RECORDING: dump_yaml(prometheus_recording(config)),
        GRAFANA_ALERTS_YAML: dump_yaml(grafana),
        GRAFANA_ALERTS_JSON: json.dumps(grafana, indent=2, ensure_ascii=False) + "\n",
    }


def write(out_dir: Path, config: MixinConfig) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in build_all(config).items():
        path = out_dir / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def write_docs(path: Path, config: MixinConfig) -> Path:
    path.write_text(render_docs(config), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True, help="directory for the rule files")
    parser.add_argument("--config", type=Path, default=None, help="mixin config YAML")
    parser.add_argument(
        "--docs", type=Path, default=DOCS, help="where to write alerts.md (default: docs/)"
    )
    args = parser.parse_args(argv)
    config = load(args.config)
    for path in [*write(args.out, config), write_docs(args.docs, config)]:
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
