"""The check's first steps: what the machine is, and nvwatch installed on it from the
copied tree without a network."""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.real_gpu.runner import REPO, Run, Step


def step_environment(run: Run) -> None:
    started = time.monotonic()
    facts = environment_facts()
    facts["simulated"] = run.options.simulate
    (run.raw / "environment.json").write_text(json.dumps(facts, indent=1) + "\n")
    run.data["environment"] = facts
    step = Step("environment", "ok", files=["environment.json"])
    notes = [n for n in facts["notes"] if n]
    step.reason = "; ".join(notes)
    step.seconds = time.monotonic() - started
    run.record(step)


def environment_facts() -> dict[str, Any]:
    release = platform.release()
    gvisor = release.startswith("4.4.0")
    kmsg = _kmsg_state()
    driver_dir, read_only = _driver_dir()
    notes = [
        "kernel 4.4.0: gVisor likely (no hardware counters, maybe no /dev/kmsg)" if gvisor else "",
        f"/dev/kmsg: {kmsg}" if kmsg != "readable" else "",
        f"driver folder {driver_dir} is read-only" if read_only else "",
    ]
    return {
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "platform": platform.platform(),
        "kernel": release,
        "gvisor_likely": gvisor,
        "dev_kmsg": kmsg,
        "driver_dir": driver_dir,
        "driver_dir_read_only": read_only,
        "nvidia_smi": shutil.which("nvidia-smi"),
        "torch": _module_version("torch"),
        "cpus": os.cpu_count(),
        "notes": notes,
    }


def _kmsg_state() -> str:
    path = Path("/dev/kmsg")
    if not path.exists():
        return "absent"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return f"not readable ({exc.strerror})"
    try:
        os.read(fd, 8192)
    except BlockingIOError:
        pass  # readable, and empty
    except OSError as exc:
        return f"not readable ({exc.strerror})"
    finally:
        os.close(fd)
    return "readable"


def _driver_dir() -> tuple[str | None, bool]:
    import ctypes.util

    candidates = [Path("/usr/local/nvidia/lib64"), Path("/usr/lib/x86_64-linux-gnu")]
    found = ctypes.util.find_library("nvidia-ml")
    for folder in candidates:
        if (folder / "libnvidia-ml.so.1").exists():
            try:
                flags = os.statvfs(folder).f_flag
            except OSError:
                return str(folder), False
            return str(folder), bool(flags & os.ST_RDONLY) or not os.access(folder, os.W_OK)
    return found, False


def _module_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def package_dirs(root: Path = REPO) -> dict[str, str]:
    """pyproject.toml's [tool.setuptools.package-dir]: installed package -> folder."""
    text = (root / "pyproject.toml").read_text()
    try:
        import tomllib
    except ImportError:  # Python 3.10: the table's lines are simple enough to read
        block = text.split("[tool.setuptools.package-dir]", 1)[-1].split("\n[", 1)[0]
        pairs = re.findall(r'^"([\w.]+)"\s*=\s*"([\w./-]+)"', block, re.MULTILINE)
        return dict(pairs)
    table = tomllib.loads(text).get("tool", {}).get("setuptools", {}).get("package-dir", {})
    return {str(k): str(v) for k, v in table.items()}


def step_install(run: Run) -> None:
    """pip install --no-index of a copy of the tree and of the carried wheels into a
    folder put first on PYTHONPATH: the image's Python keeps its own packages (PyTorch,
    pynvml, ...). Where pip cannot build nvwatch (an old setuptools, say), its packages
    are copied into that folder as pyproject.toml maps them, which is what the wheel holds."""
    name = "install"
    if not run.options.install:
        run.data["missing"] = _missing_line(run)
        run.skip(name, "skipped: --no-install; the nvwatch this Python imports is used")
        return
    limit = run.budget(120.0)
    if limit is None:
        run.skip(name, "skipped: the total time budget is spent")
        return
    started = time.monotonic()
    site, source = run.scratch / "site", run.scratch / "source"
    mapping = package_dirs()
    _copy_tree(source, ["pyproject.toml", "README.md", "LICENSE", *sorted(set(mapping.values()))])
    wheels = sorted(run.options.wheels.glob("*.whl")) if run.options.wheels.is_dir() else []
    pip = [sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-compile"]
    pip += ["--no-build-isolation", "--disable-pip-version-check", "--upgrade"]
    pip += ["--target", str(site)]
    log: list[str] = []
    for wheel in wheels:
        _pip(pip, str(wheel), log, limit - (time.monotonic() - started))
    built = _pip(pip, str(source), log, limit - (time.monotonic() - started))
    how = f"pip installed nvwatch and {len(wheels)} wheel(s) from {_shown(run.options.wheels)}"
    status = "ok"
    if not built or not (site / "nvwatch" / "agent").is_dir():
        for package, folder in mapping.items():
            target = site.joinpath(*package.split("."))
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(REPO / folder, target, ignore=shutil.ignore_patterns("__pycache__"))
        how = (
            "pip could not build nvwatch (install.log): its packages were copied as "
            f"pyproject.toml maps them; {len(wheels)} wheel(s) from {_shown(run.options.wheels)}"
        )
        status = "failed"
    (run.raw / "install.log").write_text("\n".join(log) + "\n")
    run.site = site
    run.data["missing"] = _missing_line(run)
    reason = how + (f"; {run.data['missing']}" if run.data["missing"] else "")
    run.record(Step(name, status, reason, time.monotonic() - started, ["install.log"]))


def _copy_tree(into: Path, items: list[str]) -> None:
    into.mkdir(parents=True, exist_ok=True)
    for item in items:
        path = REPO / item
        if path.is_dir():
            shutil.copytree(path, into / item, ignore=shutil.ignore_patterns("__pycache__"))
        elif path.is_file():
            shutil.copy2(path, into / item)


def _pip(pip: list[str], target: str, log: list[str], seconds: float) -> bool:
    try:
        done = subprocess.run(
            [*pip, target],
            capture_output=True,
            text=True,
            timeout=max(5.0, seconds),
            check=False,
        )
    except subprocess.TimeoutExpired:
        log.append(f"$ pip install {target}: timed out")
        return False
    log.append(f"$ pip install {target} -> exit {done.returncode}\n{done.stdout}{done.stderr}")
    return done.returncode == 0


def _shown(path: Path) -> str:
    """A path as the summary shows it: relative to the repository when inside it."""
    try:
        return str(path.resolve().relative_to(REPO))
    except ValueError:
        return str(path)


_CHECK_REQUIREMENTS = r"""
import json, re, sys
from importlib import metadata
try:
    from packaging.requirements import Requirement
except ImportError:
    Requirement = None
report = []
for text in json.loads(sys.argv[1]):
    name = re.split(r"[<>=!~;\[ ]", text, maxsplit=1)[0]
    try:
        version = metadata.version(name)
    except metadata.PackageNotFoundError:
        report.append([name, None, text])
        continue
    spec = Requirement(text).specifier if Requirement is not None else None
    if spec is not None and not spec.contains(version, prereleases=True):
        report.append([name, version, text])
print(json.dumps(report))
"""


def requirements(root: Path = REPO) -> list[str]:
    """pyproject.toml's [project] dependencies."""
    text = (root / "pyproject.toml").read_text()
    try:
        import tomllib
    except ImportError:
        block = text.split("dependencies = [", 1)[-1].split("\n]", 1)[0]
        return re.findall(r'^\s*"([^"]+)"', block, re.MULTILINE)
    return [str(r) for r in tomllib.loads(text).get("project", {}).get("dependencies", [])]


def _missing_line(run: Run) -> str:
    """One line: the agent's requirements that are missing or outside their range, as the
    Python that runs the agent sees them."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHECK_REQUIREMENTS, json.dumps(requirements())],
            capture_output=True,
            text=True,
            timeout=30,
            cwd=run.scratch,
            env=run.env(),
            check=False,
        )
        report = json.loads(done.stdout)
    except (subprocess.TimeoutExpired, ValueError, OSError):
        return "could not check nvwatch's requirements"
    if not report:
        return ""
    missing = [name for name, version, _ in report if version is None]
    off = [f"{name} {version} (needs {text})" for name, version, text in report if version]
    parts = []
    if missing:
        parts.append(
            f"missing: {', '.join(missing)} (put their CPython {sys.version_info[0]}."
            f"{sys.version_info[1]} manylinux x86-64 wheels in {_shown(run.options.wheels)})"
        )
    if off:
        parts.append("outside nvwatch's range: " + ", ".join(off))
    return "; ".join(parts)
