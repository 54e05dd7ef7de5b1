"""Generate docs/metrics.md from the catalogue, so the reference can never drift.

python -m agent.metrics_doc > docs/metrics.md
"""

from __future__ import annotations

from agent.catalogue import CATALOGUE

_SECTIONS = (
    ("nvwatch_gpu_", "GPU"),
    ("nvwatch_nvlink_", "NVLink"),
    ("nvwatch_ib_", "InfiniBand"),
    ("nvwatch_host_", "Host"),
    ("nvwatch_agent_", "Agent"),
)

_HEADER = """# Metrics reference

Generated from `agent/catalogue.py` by `python -m agent.metrics_doc`; a test fails when
this file and the code disagree. Names are a contract: dashboards and alerts use them.

Conventions: base units (bytes, seconds, watts, joules, celsius, hertz, ratios 0..1);
counters end in `_total`; every per-GPU series carries `gpu` (NVML index) and `uuid`;
a value the hardware does not support is absent, never 0; a GPU that stops answering
keeps `nvwatch_gpu_up 0` and loses its other series.
"""


def render() -> str:
    lines = [_HEADER]
    for prefix, title in _SECTIONS:
        lines.append(f"\n## {title}\n")
        lines.append("| metric | type | unit | labels | meaning |")
        lines.append("|---|---|---|---|---|")
        for spec in CATALOGUE:
            if not spec.name.startswith(prefix):
                continue
            labels = ", ".join(f"`{label}`" for label in spec.labels) or "–"
            meaning = spec.help.replace("|", "\\|")
            unit = spec.unit or "–"
            lines.append(f"| `{spec.name}` | {spec.type.value} | {unit} | {labels} | {meaning} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
