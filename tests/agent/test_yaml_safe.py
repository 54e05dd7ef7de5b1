"""The one YAML loader (common/yaml_safe.py) of every file the agent reads.

From outside first: real `nvwatch` processes given a hostile file as --config,
--web-config, a mixin config and an inventory. Before, the web config took aliases
(a 475-byte alias bomb: 2.5 s, 730 MB and a 76 MB error line; a 1 KB one 25 s and
2.2 GB), a web config nested 50,000 deep ended in a RecursionError traceback, a
5,000-digit integer was a traceback from --config and the inventory, and a message
without file or key from the web config.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from nvwatch.common.yaml_safe import (
    MAX_DEPTH,
    MAX_INT_DIGITS,
    SHOWN_CHARS,
    ConfigError,
    load_yaml_text,
    shown,
)

NVWATCH = [sys.executable, "-m", "nvwatch.agent.cli"]
# far more than one line naming a file, a key path and a bounded value needs
MAX_LINE = 600


def alias_bomb(levels: int = 7, width: int = 9) -> str:
    """A flow list of anchors, each a list of `width` aliases of the one before: a few
    hundred bytes that expand to width**levels strings."""
    items = ["&a0 [" + ", ".join(['"xxxxxxxxxx"'] * width) + "]"]
    items += [f"&a{n} [" + ", ".join([f"*a{n - 1}"] * width) + "]" for n in range(1, levels)]
    return "[" + ", ".join(items) + "]"


# value (flow YAML) -> what the one line must say about it
VALUES: dict[str, tuple[str, str]] = {
    "alias-bomb": (alias_bomb(), "aliases (*name) are not allowed"),
    "deep": ("[" * 50_000 + "]" * 50_000, f"nested too deeply: more than {MAX_DEPTH} levels"),
    "huge-int": ("9" * 5_000, "an integer of 5,000 digits"),
    "base-60-int": ("1" + ":00" * 2_000, "an integer of 4,001 digits"),
    "bad-date": ("2001-13-45", "'2001-13-45' is not a valid !!timestamp"),
    # spaces: no valid rack name, and no valid anything else either
    "long-string": ('"' + "x " * 49_999 + "xx" + '"', "(100,000 characters)"),
}


def _config(tmp_path: Path, value: str) -> tuple[list[str], Path, str]:
    path = tmp_path / "nvwatch.yaml"
    path.write_text(f"seed: {value}\n")
    return ["dump", "--sources", "host", "--settle", "0", "--config", str(path)], path, "seed"


def _web(tmp_path: Path, value: str) -> tuple[list[str], Path, str]:
    path = tmp_path / "web.yml"
    path.write_text(f"rate_limit:\n  interval: 1s\n  burst: {value}\n")
    args = ["serve", "--sources", "host", "--listen", "127.0.0.1:0", "--web-config", str(path)]
    return args, path, "rate_limit.burst"


def _mixin(tmp_path: Path, value: str) -> tuple[list[str], Path, str]:
    path = tmp_path / "mixin.yaml"
    path.write_text(f"gpu_temp_margin_celsius: {value}\n")
    out = tmp_path / "alerts"
    return ["alerts", "build", "--config", str(path), "--out", str(out)], path, "gpu_temp_margin"


def _inventory(tmp_path: Path, value: str) -> tuple[list[str], Path, str]:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        f"nodes:\n  - {{hostname: n1, address: 10.0.0.1, node_class: dgx, rack: {value}}}\n"
    )
    # a bad rack is named by the file's line and the column, not by the key path
    key = "invalid rack" if "x x" in value else "nodes[0].rack"
    return ["inventory", "--in", str(path), "--out", str(tmp_path / "sd")], path, key


KINDS: dict[str, Callable[[Path, str], tuple[list[str], Path, str]]] = {
    "config": _config,
    "web-config": _web,
    "mixin-config": _mixin,
    "inventory": _inventory,
}


@pytest.mark.parametrize("value", sorted(VALUES))
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_hostile_yaml_file_is_one_line_naming_file_and_key(
    tmp_path: Path, kind: str, value: str
) -> None:
    text, reason = VALUES[value]
    args, path, key = KINDS[kind](tmp_path, text)
    started = time.monotonic()
    completed = subprocess.run([*NVWATCH, *args], capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - started
    assert completed.returncode == 2, completed.stderr[-2000:]
    assert "Traceback" not in completed.stderr
    lines = completed.stderr.splitlines()
    assert len(lines) == 1, [line[:200] for line in lines[:5]]
    (line,) = lines
    assert len(line) < MAX_LINE, line[:MAX_LINE]
    assert line.startswith("nvwatch: error: ")
    assert str(path) in line and key in line and reason in line, line
    assert elapsed < 5, f"{elapsed:.1f}s"


def _load(text: str) -> object:
    return load_yaml_text(text, Path("/etc/nvwatch/web.yml"), "web config")


def _refusal(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        _load(text)
    message = str(caught.value)
    assert message.startswith("web config /etc/nvwatch/web.yml") and "\n" not in message
    return message


def test_nesting_up_to_the_bound_loads_and_one_more_level_is_refused() -> None:
    assert _load("a: " + "[" * (MAX_DEPTH - 1) + "]" * (MAX_DEPTH - 1)) is not None
    message = _refusal("a: " + "[" * MAX_DEPTH + "]" * MAX_DEPTH)
    assert f"a{'[0]' * (MAX_DEPTH - 1)}: nested too deeply" in message


def test_a_megabyte_of_brackets_is_refused_quickly() -> None:
    started = time.monotonic()
    _refusal("[" * (1 << 20))
    assert time.monotonic() - started < 5


def test_integers_up_to_the_bound_load_and_longer_ones_are_refused() -> None:
    assert _load(f"n: {'9' * MAX_INT_DIGITS}") == {"n": int("9" * MAX_INT_DIGITS)}
    assert _load(f"n: -0x{'f' * MAX_INT_DIGITS}") == {"n": -int("f" * MAX_INT_DIGITS, 16)}
    assert _load("n: 1_000_000") == {"n": 1_000_000}  # underscores are no digits
    message = _refusal(f"n: [1, 2, {'9' * (MAX_INT_DIGITS + 1)}]")
    assert f"n[2]: an integer of {MAX_INT_DIGITS + 1} digits" in message
    assert "(line 1, column 11)" in message
    # a float is a float: no bound needed, no int() behind it
    assert _load(f"n: {'9' * 400}.5") == {"n": float("9" * 400)}


def test_anchors_alone_are_harmless_and_aliases_are_named() -> None:
    assert _load("a: &x 1\nb: 2\n") == {"a": 1, "b": 2}
    assert "users.bob: aliases (*name) are not allowed" in _refusal(
        "users:\n  alice: &h hash\n  bob: *h\n"
    )


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a: !!int abc\n", "a: 'abc' is not a valid !!int"),
        ("a: !!int ''\n", "a: '' is not a valid !!int"),
        ("a: [!!timestamp x]\n", "a[0]: 'x' is not a valid !!timestamp"),
        ("a: {b: !!bool maybe}\n", "a.b: 'maybe' is not a valid !!bool"),
        ("a: !<" + "t" * 10_000 + "> 1\n", "could not determine a constructor"),
        ("{[a]: 1}\n", "found unhashable key"),
        ("a: [\n", "not valid YAML at line 2, column 1"),
    ],
)
def test_every_constructor_failure_is_one_bounded_line(text: str, fragment: str) -> None:
    message = _refusal(text)
    assert fragment in message and len(message) < MAX_LINE, message[:MAX_LINE]


def test_a_key_path_shows_odd_keys_bounded_and_on_one_line() -> None:
    assert "'a\\nb'.c: 'q' is not a valid !!int" in _refusal('"a\\nb": {c: !!int q}\n')
    message = _refusal("? " + "k" * 5000 + "\n: !!int q\n")  # (a simple key ends at 1,024)
    assert "(5,000 characters): 'q' is not a valid !!int" in message
    assert len(message) < MAX_LINE


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("short", "'short'"),
        ("a\nb", "'a\\nb'"),
        (42, "42"),
        (None, "None"),
        ("x" * 1_000_000, "'" + "x" * (SHOWN_CHARS - 1) + "… (1,000,000 characters)"),
        (b"\x00" * 100, repr(b"\x00" * 100)[:SHOWN_CHARS] + "… (100 bytes)"),
        (10**5000, "an integer of about 5,000 digits"),
    ],
    ids=["short", "newline", "int", "none", "megabyte", "bytes", "huge-int"],
)
def test_shown_is_a_bounded_repr(value: object, expected: str) -> None:
    assert shown(value) == expected


def test_shown_never_builds_a_whole_big_value() -> None:
    huge = [["x" * 1000] * 1000] * 1000  # a billion characters if printed whole
    started = time.monotonic()
    text = shown(huge)
    assert time.monotonic() - started < 0.5
    assert len(text) < 100 and text.endswith("… (1,000 items)") and "\n" not in text
