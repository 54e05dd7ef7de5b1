"""No import cycle between the top-level packages, and each imports only those before it:

    common  <-  mixin  <-  agent  <-  alerts  <-  report  <-  dashboards

common/ imports none of the others, mixin/ only common/. The capacity report (report/) is
a Prometheus client, not part of the agent: it reads the mixin config and uses the agent's
thread helper, but nothing in agent/ imports it (the HTTP connection both make is in
common/), and it never imports the agent's server or sources
(tests/agent/test_import_boundary.py). The dashboard previews draw with its style.

Every import counts, at the top of a module or inside a function (a lazy import is still
a dependency). The command modules are the exception: they gather every package behind
one command line, so they import from all of them and nothing is built on them: the
`nvwatch` command (agent/cli/) and the mixin's build commands (mixin/commands.py). The
simulator (sim/) is outside this graph: the agent reaches it through one door, which
tests/agent/test_import_boundary.py checks.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from itertools import pairwise
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("agent", "alerts", "common", "dashboards", "mixin", "report")
LAYERS = ("common", "mixin", "agent", "alerts", "report", "dashboards")  # each above the last
COMMAND_MODULES = ("agent/cli/", "mixin/commands.py")

# package -> package it imports -> where ("alerts/build.py:24")
Edges = dict[str, dict[str, list[str]]]


def package_imports(root: Path) -> Edges:
    """Which top-level package imports which, from the source under `root`."""
    edges: Edges = defaultdict(lambda: defaultdict(list))
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            where = path.relative_to(root).as_posix()
            if where.startswith(COMMAND_MODULES):
                continue
            for node in ast.walk(ast.parse(path.read_text(), where)):
                names: list[str] = []
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    # `from nvwatch import mixin` names the package in the alias
                    names = [f"{node.module}.{alias.name}" for alias in node.names]
                for name in names:
                    parts = name.split(".")
                    other = parts[1] if parts[0] == "nvwatch" and len(parts) > 1 else None
                    found = f"{where}:{node.lineno}"
                    if (
                        other in PACKAGES
                        and other != package
                        and found not in edges[package][other]
                    ):
                        edges[package][other].append(found)
    return edges


def cycles(edges: Edges) -> list[list[str]]:
    """Each cycle of packages, as the path that closes it ([a, b, a])."""
    found: list[list[str]] = []

    def walk(path: list[str]) -> None:
        for target in sorted(edges.get(path[-1], {})):
            if target == path[0]:
                found.append([*path, target])
            elif target not in path and target > path[0]:  # each cycle once, from its least
                walk([*path, target])

    for start in sorted(edges):
        walk([start])
    return found


def _explained(cycle: list[str], edges: Edges) -> str:
    steps = [f"{a} -> {b} ({', '.join(edges[a][b][:3])})" for a, b in pairwise(cycle)]
    return "; ".join(steps)


def test_no_import_cycle_between_the_packages() -> None:
    edges = package_imports(REPO)
    assert [_explained(c, edges) for c in cycles(edges)] == []
    assert edges["mixin"].keys() == {"common"}  # the walk sees the mixin config's imports


def upward(edges: Edges) -> list[str]:
    """Each import of a package from one below it in LAYERS, with where."""
    return [
        f"{package} -> {other} ({', '.join(where[:3])})"
        for package, imported in sorted(edges.items())
        for other, where in sorted(imported.items())
        if LAYERS.index(other) > LAYERS.index(package)
    ]


def test_each_package_imports_only_the_layers_below_it() -> None:
    assert sorted(LAYERS) == sorted(PACKAGES)
    edges = package_imports(REPO)
    assert upward(edges) == []
    # the walk sees the report's imports, and agent/cli/ (which runs it) is left out
    assert {"agent", "mixin"} <= edges["report"].keys()
    assert "report" in edges["dashboards"]


def test_the_walk_finds_the_agent_importing_the_report(tmp_path: Path) -> None:
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "agent" / "probe.py").write_text("from nvwatch.report.prom import x\n")
    assert upward(package_imports(tmp_path)) == ["agent -> report (agent/probe.py:1)"]


def test_the_walk_finds_a_cycle_however_it_is_imported(tmp_path: Path) -> None:
    for line in ("from nvwatch.agent.config import load_yaml_text",
                 "import nvwatch.agent.durations",
                 "from nvwatch import agent",
                 "def later():\n    from nvwatch.agent import config"):  # fmt: skip
        for package in PACKAGES:
            (tmp_path / package).mkdir(exist_ok=True)
        (tmp_path / "agent" / "report.py").write_text("from nvwatch.mixin.config import load\n")
        (tmp_path / "mixin" / "config.py").write_text(line + "\n")
        edges = package_imports(tmp_path)
        assert cycles(edges) == [["agent", "mixin", "agent"]], line
        # and a command module may import from every package
        (tmp_path / "agent" / "report.py").unlink()
        (tmp_path / "agent" / "cli").mkdir(exist_ok=True)
        (tmp_path / "agent" / "cli" / "x.py").write_text("from nvwatch.mixin.config import load\n")
        assert cycles(package_imports(tmp_path)) == [], line
        (tmp_path / "agent" / "cli" / "x.py").unlink()
