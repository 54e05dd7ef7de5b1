"""The deploy files name what this repository builds: the systemd unit runs the wheel's
virtual environment, and the DaemonSet's image is the one scripts/release builds,
renamed by the operator through kustomize's image transformer."""

from __future__ import annotations

import os
import shlex
import subprocess
from importlib.metadata import version
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import require_tool

REPO = Path(__file__).resolve().parents[2]
KUSTOMIZE = REPO / "deploy" / "kubernetes"
UNIT = REPO / "deploy" / "systemd" / "nvwatch.service"
# scripts/release's names: the image it builds, the unit's virtual environment
IMAGE = "localhost/nvwatch"
PREFIX = "/opt/nvwatch"


def _version() -> str:
    return version("nvwatch")


def _render(directory: Path) -> list[dict[str, Any]]:
    kubectl = require_tool("kubectl")
    done = subprocess.run(
        [kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def _images(docs: list[dict[str, Any]]) -> list[str]:
    return [
        c["image"]
        for d in docs
        if d["kind"] == "DaemonSet"
        for c in d["spec"]["template"]["spec"]["containers"]
    ]


def test_as_committed_the_daemonset_runs_the_image_the_release_builds() -> None:
    assert _images(_render(KUSTOMIZE)) == [f"{IMAGE}:{_version()}"]


def test_an_overlay_sets_the_image_the_operator_pushed(tmp_path: Path) -> None:
    pushed = "registry.example.org/gpu/nvwatch"
    overlay = {
        "resources": [os.path.relpath(KUSTOMIZE, tmp_path)],
        "images": [{"name": IMAGE, "newName": pushed, "newTag": "0.1.0-site1"}],
    }
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump(overlay), encoding="utf-8")
    assert _images(_render(tmp_path)) == [f"{pushed}:0.1.0-site1"]


def test_the_kustomization_says_how_to_build_and_push_the_image() -> None:
    text = (KUSTOMIZE / "kustomization.yaml").read_text(encoding="utf-8")
    assert "scripts/release" in text
    assert f"buildah push {IMAGE}:{_version()} docker://" in text
    assert f"kustomize edit set image {IMAGE}=" in text


def _unit() -> tuple[list[str], str]:
    text = UNIT.read_text(encoding="utf-8")
    exec_start = next(x for x in text.splitlines() if x.startswith("ExecStart="))
    return shlex.split(exec_start.removeprefix("ExecStart=")), text


def test_the_unit_runs_the_virtual_environment_made_from_the_built_wheel() -> None:
    """scripts/release runs these install lines under a scratch root and this ExecStart
    (tests/release); here, that they name this version's wheel and no registry."""
    argv, text = _unit()
    assert argv[:2] == [f"{PREFIX}/bin/nvwatch", "serve"]
    wheel = f"dist/nvwatch-{_version()}-py3-none-any.whl"
    assert f"#   python3 -m venv {PREFIX}\n" in text
    assert f"#   {PREFIX}/bin/pip install {wheel}\n" in text
    assert "pip install nvwatch" not in text
    assert "https://" not in text
