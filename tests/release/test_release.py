"""scripts/release: the sdist and wheel build, pass their checks, install as the systemd
unit says and run; the Containerfile's exact context builds with buildah and runs.

The image itself (a base image and minutes of vfs copies) is built by `scripts/release`
and recorded in docs/release.md; the last test here fails when the Containerfile changed
since that record.
"""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import subprocess
import sys
import zipfile
from importlib.machinery import SourceFileLoader
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import require_tool

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "release"
CONTAINERFILE = REPO / "deploy" / "container" / "Containerfile"
RECORD = REPO / "docs" / "release.md"
STEPS = (
    "sdist and wheel",
    "metadata renders",
    "wheel contents",
    "every import declared",
    "installed as deploy/systemd/nvwatch.service says",
    "container context",
)

pytestmark = pytest.mark.timeout(600)


def _script() -> ModuleType:
    """scripts/release as a module, for its checks one at a time."""
    loader = SourceFileLoader("nvwatch_release_script", str(SCRIPT))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[loader.name] = module  # dataclasses look their module up there
    loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def release() -> ModuleType:
    return _script()


@pytest.fixture(scope="module")
def context_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One `scripts/release --context-only` run: its dist folder and its output."""
    require_tool("buildah")
    out = tmp_path_factory.mktemp("release") / "dist"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--context-only"],
        capture_output=True, text=True, timeout=540, check=False, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return out, done.stdout


def test_the_release_builds_checks_installs_and_runs_the_artifacts(
    release: ModuleType, context_run: tuple[Path, str]
) -> None:
    out, stdout = context_run
    version = release.version()
    assert sorted(p.name for p in out.iterdir()) == [
        f"nvwatch-{version}-py3-none-any.whl",
        f"nvwatch-{version}.tar.gz",
    ]
    done = [line.removeprefix("ok    ") for line in stdout.splitlines() if line.startswith("ok ")]
    assert [d for s in STEPS for d in done if d.startswith(s)] == done and len(done) == len(STEPS)
    # the unit's venv and the container's both ran the simulated node's eight GPUs
    assert stdout.count(f"nvwatch, version {version}") == 2
    assert stdout.count("8 GPUs up") == 2
    assert stdout.rstrip().splitlines()[-1].startswith("all checks passed")


def test_the_containerfile_copies_every_folder_the_wheel_is_built_from(
    release: ModuleType,
) -> None:
    build, _ = release.parse_containerfile(CONTAINERFILE)
    copied = {src for k, a in build.instructions if k == "COPY" for src in a.split()[:-1]}
    folders = set(release.load_pyproject()["tool"]["setuptools"]["package-dir"].values())
    assert copied == {"pyproject.toml", "README.md", *folders}


def test_a_context_without_a_package_folder_fails(release: ModuleType, tmp_path: Path) -> None:
    """What the issue found: the image never copied mixin/, so `pip install` failed."""
    require_tool("buildah")
    broken = tmp_path / "Containerfile"
    text = CONTAINERFILE.read_text(encoding="utf-8")
    broken.write_text(text.replace("COPY mixin ./mixin\n", ""), encoding="utf-8")
    buildah = release.Buildah(tmp_path / "storage", "vfs", "chroot")
    try:
        with pytest.raises(release.ReleaseError) as err:
            release.check_context(tmp_path / "ctx", release.Report(), buildah, broken)
        assert buildah("images", "--quiet").strip() == "", "the context's image was left"
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)
    assert "exited" in str(err.value)
    assert "package directory 'mixin' does not exist" in err.value.detail


def _wheel(path: Path, files: dict[str, str], requires: list[str]) -> Path:
    info = f"nvwatch-{_script().version()}.dist-info"
    meta = "Metadata-Version: 2.4\nName: nvwatch\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{info}/METADATA", meta)
        zf.writestr(f"{info}/entry_points.txt", "[console_scripts]\n")
        for name, text in files.items():
            zf.writestr(name, text)
    return path


def test_an_undeclared_or_unused_dependency_fails(release: ModuleType, tmp_path: Path) -> None:
    # attrs is installed (grafanalib needs it) but nvwatch does not declare it
    module = "import click\n\ndef lazy():\n    import attr\n"
    wheel = _wheel(tmp_path / "w.whl", {"nvwatch/agent/x.py": module}, ["click>=8", "psutil>=5.9"])
    with pytest.raises(release.ReleaseError) as err:
        release.check_dependencies(wheel, release.Report())
    message = str(err.value)
    assert "attr (imported by nvwatch/agent/x.py) is from attrs, not declared" in message
    assert "declared but never imported: psutil" in message


def test_imports_only_for_type_checking_need_no_dependency(release: ModuleType) -> None:
    source = (
        "from typing import TYPE_CHECKING\nimport yaml\nfrom .x import y\n"
        "if TYPE_CHECKING:\n    import numpy\n"
    )
    assert release.imported_modules(source) == {"typing", "yaml"}


def test_a_wheel_with_another_top_level_name_fails(release: ModuleType, tmp_path: Path) -> None:
    wheel = _wheel(tmp_path / "w.whl", {"tests/test_x.py": "", "nvwatch/agent/a.py": ""}, [])
    with pytest.raises(release.ReleaseError, match="other top-level names"):
        release.check_wheel(wheel, release.Report())


def test_the_recorded_release_built_this_containerfile_into_an_image(
    release: ModuleType,
) -> None:
    text = RECORD.read_text(encoding="utf-8")
    stale = "docs/release.md is older than the Containerfile: run `scripts/release` as it says"
    digest = hashlib.sha256(CONTAINERFILE.read_bytes()).hexdigest()
    assert f"Containerfile sha256: `{digest}`" in text, stale
    assert f"- nvwatch {release.version()}, commit " in text, stale
    for step in ("image build (buildah bud)", "image runs (buildah from + buildah run)"):
        assert f"\n| {step} | " in text, f"docs/release.md records no {step}"
    assert "8 GPUs up" in text.split("| image runs", 1)[1].splitlines()[0]
