"""Comments and docstrings point at things a reader of the repository can open.

A file named in a comment or docstring (`sim/nvml/core.py`, `alerts/generated/*.yaml`,
`README.md`) must be in the repository: a path with a folder is looked up from the top
of the checkout, from the file's own folder or any folder above it, or as the tail of a
tracked path (`provisioning/alerting/*.yaml`); a bare `name.py` or `name.md` in the
file's folder or a folder above it. A path into another project names that project
beside it (EXTERNAL). Nothing points outside the checkout (`../x`, `/work/...`), and no
comment cites an issue by number: the tracker is not part of the repository.
"""

from __future__ import annotations

import ast
import fnmatch
import io
import re
import subprocess
import tokenize
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FOLDERS = ("agent", "alerts", "benchmarks", "common", "dashboards", "mixin", "report", "scripts")
FOLDERS += ("sim", "tests")
# paths in other projects' repositories, each with the project that must be named beside it
EXTERNAL = {
    "etc/default-counters.csv": "dcgm-exporter",
    "internal/pkg/transformation/hpc.go": "dcgm-exporter",
    "pkg/nvml/mock/shared/gpus/a100.go": "go-nvml",
    "sysfs/class_infiniband.go": "procfs",
}
# file names that are no file of the repository, with what they are
NOT_FILES = {
    "my_script.py": "a user's script, in an example command line",
    "summary.md": "the report scripts/real-gpu-check writes",
}

_EXTENSIONS = "py|md|yaml|yml|json|toml|txt|prom|csv|sh|cfg|ini|service|go|proto|html|png|pyi"
# a path: folders then a file with one of the extensions; not part of a longer word, a
# URL or a placeholder (<pid>/x.py, {name}.md, $DIR/x.yaml)
_PATH = re.compile(rf"(?<![\w./<{{$*-])((?:[\w*.-]+/)*[\w*.-]+\.(?:{_EXTENSIONS}))(?![\w/-])")
_URL = re.compile(r"\S+://\S+")
_OUTSIDE = re.compile(r"(?<![\w.])(?:\.\./|/work/|/home/)[\w./-]+")
_ISSUE = re.compile(r"\bissues?\s*#?\d+|\(#\d+\)", re.IGNORECASE)


def _tracked() -> set[str]:
    listed = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert len(listed) > 300
    return set(listed) | {p.as_posix() for f in listed for p in Path(f).parents}


def _sources(tracked: set[str]) -> Iterator[Path]:
    """Python files and scripts of the scanned folders, generated code left out."""
    for folder in FOLDERS:
        for path in sorted((REPO / folder).rglob("*")):
            rel = path.relative_to(REPO).as_posix()
            if rel not in tracked or not path.is_file() or "generated" in path.parts:
                continue
            if "_pb2" in path.name:  # protoc's output, checked against scripts/gen-podresources
                continue
            if path == Path(__file__).resolve():  # this file's examples of what fails
                continue
            if path.suffix == ".py" or (path.suffix == "" and path.read_bytes()[:2] == b"#!"):
                yield path


def comments_and_docstrings(path: Path) -> Iterator[tuple[int, str]]:
    """(line, text) of every comment and docstring of a Python file, or of every `#`
    comment of a script."""
    text = path.read_text()
    if path.suffix != ".py":
        for number, line in enumerate(text.splitlines(), 1):
            if "#" in line and not line.startswith("#!"):
                yield number, line[line.index("#") :]
        return
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
    for node in ast.walk(ast.parse(text, str(path))):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            docstring = ast.get_docstring(node, clean=False)
            if docstring is not None:
                yield node.body[0].lineno, docstring


def _exists(reference: str, where: Path, tracked: set[str]) -> bool:
    folders = [f for f in (where.parent, *where.parent.parents) if f.is_relative_to(REPO)]
    candidates = [
        (folder / reference).resolve().relative_to(REPO).as_posix()
        for folder in folders
        if (folder / reference).resolve().is_relative_to(REPO)
    ]
    if "/" in reference:  # and as the tail of a tracked path
        candidates += [f"*/{reference}"]
    elif not reference.endswith((".py", ".md")):
        return True  # a bare report.html, nvwatch-rules.yaml: a name of what is written
    return any(fnmatch.filter(tracked, c) if "*" in c else c in tracked for c in candidates)


def broken_references(path: Path, texts: Iterable[tuple[int, str]], tracked: set[str]) -> list[str]:
    """What is wrong with the comments and docstrings `texts` of the file at `path`."""
    found = []
    where = path.relative_to(REPO).as_posix()
    for line, text in texts:
        text = _URL.sub(" ", text)
        found += [f"{where}:{line}: cites {m.group(0)!r}" for m in _ISSUE.finditer(text)]
        found += [f"{where}:{line}: outside: {m.group(0)}" for m in _OUTSIDE.finditer(text)]
        for match in _PATH.finditer(text):
            reference = match.group(1)
            if reference.startswith("../") or reference in NOT_FILES:
                continue  # outside (reported above), or no file at all
            if re.fullmatch(r"[A-Z_]+\.(?!md|py)\w+", reference):
                continue  # a placeholder: SHARD.service
            if reference in EXTERNAL:
                if EXTERNAL[reference] not in text:
                    found.append(f"{where}:{line}: {reference} without {EXTERNAL[reference]}")
            elif not _exists(reference, path, tracked):
                found.append(f"{where}:{line}: no such file: {reference}")
    return found


def test_comments_and_docstrings_name_files_that_exist() -> None:
    tracked = _tracked()
    sources = list(_sources(tracked))
    assert len(sources) > 400
    broken = [b for p in sources for b in broken_references(p, comments_and_docstrings(p), tracked)]
    assert broken == []


# as if written in agent/sources/nvml/probe.py
_PROBE = REPO / "agent" / "sources" / "nvml" / "probe.py"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("see DESIGN.md", "no such file: DESIGN.md"),
        ("figures from ../shared/hardware-facts.md", "outside: ../shared/hardware-facts.md"),
        ("as /work/shared/STYLE.md says", "outside: /work/shared/STYLE.md"),
        ("budget of issue 13", "cites 'issue 13'"),
        ("fixed (#42)", "cites '(#42)'"),
        ("the reader in agent/sources/nvml/sourcez.py", "no such file: agent/sources/nvml/"),
        ("like sim/nvml/mig_*.yaml", "no such file: sim/nvml/mig_*.yaml"),
        ("beside it in library.py", "no such file: library.py"),
        ("as in internal/pkg/transformation/hpc.go", "without dcgm-exporter"),
    ],
)
def test_the_scan_finds_each_kind_of_bad_reference(text: str, expected: str) -> None:
    (found,) = broken_references(_PROBE, [(1, text)], _tracked())
    assert expected in found


@pytest.mark.parametrize(
    "text",
    [
        "agent/sources/nvml/source.py, sim/nvml/mig_*.py and README.md",
        "beside it in reads.py; one up in registry.py; /sys/class/infiniband/x/y.txt",
        "dcgm-exporter's internal/pkg/transformation/hpc.go; writes report.html",
        "https://example.com/a/b.py; provisioning/alerting/*.yaml; SHARD.service",
    ],
)
def test_the_scan_takes_what_a_reader_can_find(text: str) -> None:
    assert broken_references(_PROBE, [(1, text)], _tracked()) == []
