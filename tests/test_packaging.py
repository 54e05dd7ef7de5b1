"""The installed layout: one `nvwatch` namespace, nothing else at the top of site-packages.

The repository keeps agent/, alerts/, common/, dashboards/, mixin/, report/ and sim/ at its
top; pyproject.toml maps them to nvwatch.agent, nvwatch.alerts, ...; a checkout imports
them through the editable install (scripts/test), so every module has one path.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[1]
TOPS = ("agent", "alerts", "common", "dashboards", "mixin", "report", "sim")


def _pyproject() -> dict[str, object]:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def _package_dirs() -> set[str]:
    found = set()
    for top in TOPS:
        for init in (REPO / top).rglob("__init__.py"):
            rel = init.parent.relative_to(REPO)
            found.add("nvwatch." + ".".join(rel.parts))
    return found


def test_every_package_folder_is_listed_for_the_install() -> None:
    setuptools = _pyproject()["tool"]["setuptools"]  # type: ignore[index]
    assert set(setuptools["packages"]) == _package_dirs()  # type: ignore[index]
    assert setuptools["package-dir"] == {f"nvwatch.{t}": t for t in TOPS}  # type: ignore[index]


def test_the_repository_tracks_no_symlink() -> None:
    tracked = subprocess.run(
        ["git", "ls-files", "-s"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert len(tracked) > 300
    assert [line.split("\t")[1] for line in tracked if line.startswith("120000 ")] == []


def _python_files() -> list[Path]:
    files = []
    for folder in (*TOPS, "tests", "benchmarks", "scripts", "deploy"):
        files += [p for p in (REPO / folder).rglob("*.py") if "generated" not in p.parts]
    return files


def test_no_module_imports_the_old_top_level_names() -> None:
    """`import agent` would load a second copy of every module beside nvwatch.agent."""
    offenders = []
    for path in _python_files():
        if path.name.endswith("_pb2.py") or path.name.endswith("_pb2_grpc.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [
                f"{path.relative_to(REPO)}:{node.lineno} {n}"
                for n in names
                if n.split(".")[0] in TOPS
            ]
    # and code written as text for another interpreter (python -c, -m)
    old = "(agent|alerts|common|dashboards|mixin|report|sim)"
    in_text = re.compile(rf"(from|import) {old}(\.\w| import)|-m {old}\.")
    for path in _python_files():
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            if in_text.search(line) and not line.lstrip().startswith(("from ", "import ")):
                offenders.append(f"{path.relative_to(REPO)}:{lineno} (in text)")
    assert not offenders, "import through nvwatch.*: " + ", ".join(offenders)


@pytest.mark.timeout(300)
def test_the_wheel_installs_only_the_nvwatch_namespace(tmp_path: Path) -> None:
    # a copy, so that the build's egg-info and build/ never land in the checkout
    source = tmp_path / "src"
    shutil.copytree(
        REPO,
        source,
        symlinks=True,
        ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "build", "*.egg-info"),
    )
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("nvwatch-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert tops == {"nvwatch"}
    for expected in (
        "nvwatch/agent/cli/__init__.py",
        "nvwatch/alerts/rules/__init__.py",
        "nvwatch/common/durations.py",
        "nvwatch/dashboards/builder.py",
        "nvwatch/mixin/config.py",
        "nvwatch/sim/pynvml_shim/sitecustomize.py",
    ):
        assert expected in names


def _readme_block_after(heading: str) -> str:
    """The first ```sh block of the README section that starts with `heading`."""
    readme = (REPO / "README.md").read_text()
    section = readme.split(f"\n{heading}\n", 1)[1]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def test_the_readme_release_command_installs_what_the_release_imports() -> None:
    """After the README's install command (`pip install .`, no extras), its release
    command must bring what scripts/release imports before it builds (it failed with
    "twine is not installed"), and must not rewrite a tracked file of the user's clone."""
    release = _readme_block_after("## Build what a fleet installs")
    assert "pip install '.[release]'" in release
    assert "--record" not in release, "recording rewrites the tracked docs/release.md"
    tree = ast.parse((REPO / "scripts" / "release").read_text())
    (in_venv,) = [
        n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == "in_venv"
    ]
    needed = {
        alias.name for n in ast.walk(in_venv) if isinstance(n, ast.Import) for alias in n.names
    }
    assert needed == {"build", "twine"}
    extras = _pyproject()["project"]["optional-dependencies"]  # type: ignore[index]
    declared = {re.split(r"[<>=\[ ;]", spec, maxsplit=1)[0] for spec in extras["release"]}
    assert needed <= declared
