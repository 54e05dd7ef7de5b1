"""Fuzz the one YAML loader and the four loaders on top of it with hostile YAML.

Random nesting around the depth bound, anchors and aliases, integers around the digit
bound (decimal, hex, base 60), tags whose constructors fail, merge keys: each load
returns a value or raises its one config error type, whose message is one bounded
line naming the file. Anything else (RecursionError, int()'s ValueError, a constructor's
AttributeError) would be a traceback at start-up.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from nvwatch.agent.config import CONFIG_ERRORS, load_config_file
from nvwatch.agent.inventory import load_inventory
from nvwatch.agent.webconfig import WebConfigError, load_web_config
from nvwatch.common.yaml_safe import MAX_DEPTH, MAX_INT_DIGITS, ConfigError, load_yaml_text
from nvwatch.mixin.config import MixinConfig

from .strategies import FUZZ

MAX_LINE = 600
TAGS = [
    "!!int ", "!!float ", "!!bool ", "!!null ", "!!timestamp ", "!!binary ", "!!str ",
    "!!set ", "!!omap ", "!!pairs ", "!!seq ", "!!map ", "!!python/tuple ", "!<x> ",
]  # fmt: skip

# around the bound, and past int()'s own limit of 4,300 digits
digits = st.integers(min_value=1, max_value=MAX_INT_DIGITS + 40) | st.sampled_from([4301, 6000])
numbers = st.one_of(
    digits.map(lambda n: "9" * n),
    digits.map(lambda n: "-0x" + "f" * n),
    digits.map(lambda n: "1" + ":30" * n),
    digits.map(lambda n: "1_" * n + "0"),
    st.sampled_from(["2001-13-45", "2001-12-14t21:59:43.10-05:00", "1e999", ".nan", "0o", "0b"]),
)
scalars = st.one_of(
    numbers,
    st.tuples(st.sampled_from(TAGS), st.sampled_from(["x", "''", "1", "[]", "2001-13-45"])).map(
        "".join
    ),
    st.sampled_from(["a", "'q'", '"q\\n"', "~", "yes", "", "<<", "x" * 300]),
)
tokens = st.one_of(
    scalars,
    st.sampled_from(TAGS),
    st.sampled_from(["[", "]", "{", "}", ", ", ": ", "\n", "- ", "  ", "? ", "<<: ", "#c"]),
    st.sampled_from(["&a ", "&b ", "*a", "*b", "&a [", "---\n", "|\n  ", "%YAML 1.1\n---\n"]),
)
# token soup: mostly invalid YAML, and every construct the loader bounds
soup = st.lists(tokens, max_size=40).map("".join)


@st.composite
def nested(draw: st.DrawFn) -> str:
    """A document nested around the depth bound, with a hostile scalar at the bottom."""
    depth = draw(st.integers(min_value=0, max_value=MAX_DEPTH + 3))
    opens = draw(st.lists(st.sampled_from(["[", "{k: "]), min_size=depth, max_size=depth))
    closes = "".join("]" if o == "[" else "}" for o in reversed(opens))
    return "k: " + "".join(opens) + draw(scalars) + closes + "\n"


@st.composite
def aliased(draw: st.DrawFn) -> str:
    """A document that uses an anchor it defines: always refused."""
    value = draw(scalars | nested().map(lambda text: text[3:].strip()))
    return f"a: &x {value or 'v'}\nb: [*x, *x]\n"


documents = st.one_of(soup, nested(), aliased())


def _check(message: str, path: Path) -> None:
    assert str(path) in message, message[:MAX_LINE]
    assert "\n" not in message and len(message) < MAX_LINE, message[:MAX_LINE]


@FUZZ
@given(documents)
def test_the_loader_returns_a_value_or_one_config_error(text: str) -> None:
    path = Path("/etc/nvwatch/nvwatch.yaml")
    try:
        load_yaml_text(text, path)
    except ConfigError as exc:
        _check(str(exc), path)
        return
    assert "*x" not in text or "&x" not in text, "an alias was loaded"


@FUZZ
@given(st.integers(min_value=0, max_value=MAX_DEPTH + 3))
def test_the_depth_bound_is_exact(depth: int) -> None:
    text = "[" * depth + "]" * depth
    try:
        load_yaml_text(text, Path("x.yaml"))
    except ConfigError as exc:
        assert depth > MAX_DEPTH and "nested too deeply" in str(exc)
        return
    assert depth <= MAX_DEPTH


Loader = Callable[[Path], Any]
# each loader on top, the file name it reads, and the one error type it may raise
LOADERS: list[tuple[str, Loader, tuple[type[Exception], ...]]] = [
    ("nvwatch.yaml", lambda p: load_config_file(p, {"seed", "sources", "k", "a"}), CONFIG_ERRORS),
    ("web.yml", load_web_config, (WebConfigError,)),
    ("mixin.yaml", MixinConfig.from_yaml, (ValueError,)),  # its documented contract
    ("cluster.yaml", load_inventory, (ConfigError,)),
]


@FUZZ
@given(st.sampled_from(range(len(LOADERS))), documents)
def test_every_loader_raises_only_its_config_error(which: int, text: str) -> None:
    name, load, errors = LOADERS[which]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text(text)
        try:
            load(path)
        except errors as exc:
            _check(str(exc), path)
