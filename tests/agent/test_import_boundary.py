"""The product loads only what it runs: the simulator is a separate package, reached
through one door (agent/simulation.py), and `serve` on a real node loads no simulator,
report, dashboard or alert builder, matplotlib or numpy. The capacity report is a
Prometheus client: it never imports the node agent's server or sources.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from nvwatch.sim.ports import free_port

REPO = Path(__file__).resolve().parents[2]
PRODUCT = ("agent", "alerts", "common", "dashboards", "mixin", "report")
DOOR = REPO / "agent" / "simulation.py"


def _imports_of(path: Path, *packages: str) -> list[str]:
    """Where `path` names one of `packages`: imports, and module names in strings
    (importlib.import_module, lazy command tables)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names = [node.value]
        if any(name == p or name.startswith(p + ".") for name in names for p in packages):
            where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
            found.append(f"{where}:{node.lineno}")  # type: ignore[attr-defined]
    return found


def _simulator_imports(path: Path) -> list[str]:
    return _imports_of(path, "nvwatch.sim")


# the node agent's own machinery, which a Prometheus client has no use for
AGENT_ONLY = ("nvwatch.agent.server", "nvwatch.agent.sources")


def test_the_report_never_imports_the_agents_server_or_sources() -> None:
    modules = sorted((REPO / "report").rglob("*.py"))
    assert len(modules) > 30
    assert [hit for path in modules for hit in _imports_of(path, *AGENT_ONLY)] == []


def test_the_walk_finds_the_report_reaching_into_the_agent(tmp_path: Path) -> None:
    lines = ("from nvwatch.agent.server.loop import x", "import nvwatch.agent.sources.nvml",
             "from nvwatch.agent import sources", "x = 'nvwatch.agent.server.probe'")  # fmt: skip
    for line in lines:
        module = tmp_path / "probe.py"
        module.write_text(line + "\n")
        assert _imports_of(module, *AGENT_ONLY) == [f"{module}:1"], line
    # the agent's other modules (its thread helper) are not the node agent's machinery
    module.write_text("from nvwatch.agent.threads import thread_pool\n")
    assert _imports_of(module, *AGENT_ONLY) == []


def test_only_the_door_imports_the_simulator() -> None:
    modules = [p for folder in PRODUCT for p in sorted((REPO / folder).rglob("*.py"))]
    assert len(modules) > 100
    crossings = [hit for path in modules if path != DOOR for hit in _simulator_imports(path)]
    assert crossings == []
    assert _simulator_imports(DOOR)  # the door is where the walk would find it


def test_the_walk_finds_each_way_of_crossing(tmp_path: Path) -> None:
    for line in ("import nvwatch.sim.node", "from nvwatch.sim import nvml",
                 "from nvwatch import sim", "x = 'nvwatch.sim.commands'"):  # fmt: skip
        module = tmp_path / "probe.py"
        module.write_text(line + "\n")
        assert _simulator_imports(module) == [f"{module}:1"], line


# the agent's own modules a real-mode serve must not load, and third-party packages
NOT_LOADED = ("nvwatch.sim", "nvwatch.report", "nvwatch.dashboards", "nvwatch.alerts",
              "nvwatch.mixin", "matplotlib", "numpy", "grafanalib", "grpc", "pyipmi")  # fmt: skip

_SERVE_AND_LIST = """
import json, os, signal, sys, threading, time, urllib.request
out, port, argv = sys.argv[1], sys.argv[2], sys.argv[3:]

def list_when_serving():
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).read()
            break
        except Exception as exc:
            if getattr(exc, "code", None) == 503:
                break
            time.sleep(0.1)
    with open(out, "w") as file:
        json.dump(sorted(sys.modules), file)
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=list_when_serving, daemon=True).start()
from nvwatch.agent.cli import main
main(argv)
"""


def _modules_of_serve(tmp_path: Path, *flags: str) -> list[str]:
    script, out, port = tmp_path / "serve.py", tmp_path / "modules.json", free_port()
    script.write_text(textwrap.dedent(_SERVE_AND_LIST))
    argv = ["serve", f"--listen=127.0.0.1:{port}", *flags]
    done = subprocess.run(
        [sys.executable, str(script), str(out), str(port), *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.exists(), done.stderr
    modules: list[str] = json.loads(out.read_text())
    return modules


def _loaded(modules: list[str], package: str) -> list[str]:
    return [m for m in modules if m == package or m.startswith(package + ".")]


def test_serve_on_a_node_without_gpus_loads_only_the_agent(tmp_path: Path) -> None:
    # this machine has no NVIDIA driver: NVML is down, and the agent says so; it never
    # turns to the simulator by itself
    modules = _modules_of_serve(tmp_path, "--sources=nvml,infiniband,host")
    assert "nvwatch.agent.sources.nvml.source" in modules  # the real path ran
    assert {package: _loaded(modules, package) for package in NOT_LOADED} == {
        package: [] for package in NOT_LOADED
    }


@pytest.mark.parametrize(
    ("flags", "package"),
    [(["--sources=nvml", "--attribution=kubernetes"], "grpc"),
     (["--simulate=dgx-h100", "--sources=nvml"], "nvwatch.sim")],
)  # fmt: skip
def test_what_a_flag_needs_is_loaded_with_it(
    tmp_path: Path, flags: list[str], package: str
) -> None:
    assert _loaded(_modules_of_serve(tmp_path, *flags), package)


def test_a_bmc_config_loads_the_ipmi_client(tmp_path: Path) -> None:
    config = tmp_path / "ipmi.yml"
    config.write_text("modules:\n  default: {user: admin, pass: secret}\n")
    modules = _modules_of_serve(tmp_path, "--sources=host", f"--bmc-config={config}")
    assert _loaded(modules, "pyipmi")
    assert not _loaded(modules, "nvwatch.sim")


def test_serve_help_reads_the_scenario_names_alone() -> None:
    """--help lists every scenario and its onset from sim/scenario_names.py: printing it
    loaded 50 simulator modules (the simulated NVML among them) when the names were read
    from the modules that run the scenarios."""
    code = (
        "import json, sys\n"
        "from nvwatch.agent.cli import main\n"
        "try:\n    main(['serve', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith('nvwatch.sim'))))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    loaded = json.loads(done.stdout.splitlines()[-1])
    assert set(loaded) <= {"nvwatch.sim", "nvwatch.sim.pynvml_check", "nvwatch.sim.scenario_names"}
    assert "thermal-runaway" in done.stdout and "bmc-unreachable" in done.stdout
