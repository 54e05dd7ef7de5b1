"""Reading what the docs show and the deploy files hold: a section's fenced blocks of a
Markdown file, a systemd unit's assignments."""

from __future__ import annotations

from pathlib import Path


def section(path: Path, heading: str) -> str:
    """The Markdown section under `heading` (a whole `## ...` line), up to the next `## `."""
    text = path.read_text(encoding="utf-8")
    start = text.index(heading + "\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def blocks(path: Path, heading: str, info: str) -> list[str]:
    """The section's fenced blocks whose info string is `info` ("" for none)."""
    found: list[tuple[str, list[str]]] = []
    inside = False
    for line in section(path, heading).splitlines():
        if line.startswith("```"):
            if not inside:
                found.append((line.removeprefix("```").strip(), []))
            inside = not inside
        elif inside:
            found[-1][1].append(line)
    return ["\n".join(lines) + "\n" for kind, lines in found if kind == info]


def unit_entries(text: str, section: str | None) -> list[tuple[str, str]]:
    """(key, value) of every assignment, in `section` only where given ([Service])."""
    entries, current = [], None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = line
            continue
        key, _, value = line.partition("=")
        if section is None or current == section:
            entries.append((key.strip(), value.strip()))
    return entries
