"""Reading `nvidia-smi`'s human output: the few values the assumptions compare against.

Each parser takes the whole text and returns what it recognised, per GPU index, and
nothing for lines it does not know (drivers word these views differently over the
years); the raw text is always kept in the check's archive beside the parsed values.
"""

from __future__ import annotations

import re

_GPU = re.compile(r"^GPU (\d+):")
_LINK_SPEED = re.compile(r"^\s*Link (\d+):\s*(?:([\d.]+)\s*GB/s|<inactive>)", re.IGNORECASE)
_LINK_COUNTER = re.compile(r"^\s*Link (\d+):\s*([A-Za-z][A-Za-z0-9 _-]*?)\s*:\s*(\d+)\s*$")


def nvlink_speeds(text: str) -> dict[int, dict[int, float | None]]:
    """`nvidia-smi nvlink -s`: GPU -> link -> GB/s per direction (None: inactive)."""
    result: dict[int, dict[int, float | None]] = {}
    gpu: int | None = None
    for line in text.splitlines():
        head = _GPU.match(line)
        if head:
            gpu = int(head.group(1))
            result[gpu] = {}
            continue
        found = _LINK_SPEED.match(line)
        if found and gpu is not None:
            result[gpu][int(found.group(1))] = float(found.group(2)) if found.group(2) else None
    return result


def nvlink_counters(text: str) -> dict[int, dict[int, dict[str, int]]]:
    """`nvidia-smi nvlink -e`: GPU -> link -> counter name (lower case) -> count."""
    result: dict[int, dict[int, dict[str, int]]] = {}
    gpu: int | None = None
    for line in text.splitlines():
        head = _GPU.match(line)
        if head:
            gpu = int(head.group(1))
            result[gpu] = {}
            continue
        found = _LINK_COUNTER.match(line)
        if found and gpu is not None:
            link = result[gpu].setdefault(int(found.group(1)), {})
            link[found.group(2).strip().lower()] = int(found.group(3))
    return result


_SECTION = re.compile(r"^GPU ([0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.\d)\s*$")
_VALUE = re.compile(r"^(\s*)([^:]+?)\s*:\s*(.*?)\s*$")


def query_sections(text: str) -> list[dict[str, str]]:
    """`nvidia-smi -q`: one flat dict per GPU, keys "Section/Name" (two levels deep)."""
    gpus: list[dict[str, str]] = []
    current: dict[str, str] | None = None
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        if _SECTION.match(line):
            current = {"bus_id": line.split()[1]}
            gpus.append(current)
            stack = []
            continue
        if current is None or not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        while stack and stack[-1][0] >= indent:
            stack.pop()
        found = _VALUE.match(line)
        if found and found.group(3) != "":
            path = "/".join([name for _, name in stack] + [found.group(2).strip()])
            current.setdefault(path, found.group(3))
        else:
            stack.append((indent, line.strip().rstrip(":").strip()))
    return gpus


def number(text: str | None) -> float | None:
    """The leading number of "81559 MiB", "92 C", "40148 us"; None for N/A and the like."""
    if text is None:
        return None
    found = re.match(r"^\s*(-?\d+(?:\.\d+)?)", text)
    return float(found.group(1)) if found else None


def find(section: dict[str, str], *suffixes: str) -> str | None:
    """The first value whose key ends with one of `suffixes` (case-insensitive)."""
    lowered = {key.lower(): value for key, value in section.items()}
    for suffix in suffixes:
        for key, value in lowered.items():
            if key.endswith(suffix.lower()):
                return value
    return None
