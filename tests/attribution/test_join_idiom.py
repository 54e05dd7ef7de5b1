"""The join idioms of docs/metrics.md, evaluated by promtool; and the short form's limit."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from nvwatch.sim.metrics_doc import render
from tests.conftest import require_tool

HERE = Path(__file__).parent / "promtool"


def _queries_in_doc() -> list[str]:
    """The PromQL block under nvwatch_gpu_allocation_info, one query per paragraph."""
    text = render()
    section = text[text.index("### `nvwatch_gpu_allocation_info`") :]
    block = section[section.index("```promql") + len("```promql") : section.index("```\n\n")]
    queries = []
    for paragraph in block.strip().split("\n\n"):
        lines = [line for line in paragraph.splitlines() if not line.startswith("#")]
        queries.append(" ".join(" ".join(lines).split()))
    return queries


def _tested_queries() -> set[str]:
    text = (HERE / "join_idiom.yaml").read_text()
    exprs = re.findall(r"- expr: \|\n((?:          .*\n)+)|- expr: (.*)\n", text)
    return {" ".join((block or line).split()) for block, line in exprs}


def test_every_documented_query_is_tested() -> None:
    tested = _tested_queries()
    for query in _queries_in_doc():
        assert query in tested, f"docs/metrics.md's query is not in join_idiom.yaml: {query}"


def test_promtool_evaluates_the_documented_joins() -> None:
    promtool = require_tool("promtool")
    done = subprocess.run(
        [promtool, "test", "rules", "join_idiom.yaml"],
        cwd=HERE,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
