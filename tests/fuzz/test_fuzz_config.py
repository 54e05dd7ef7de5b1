"""Fuzz the agent's config parsers: ConfigError (or DurationError) or a value, nothing else.

A config file is whatever bytes are at the path: random bytes, YAML of any shape, and
YAML shaped like a real config with odd values.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from nvwatch.agent.config import (
    CONFIG_ERRORS,
    load_config_file,
    parse_listen,
    parse_sources,
)

from .strategies import FUZZ, near, tricky_text

ALLOWED = {"interval", "sources", "scenario", "sysfs_root", "listen", "seed", "simulate"}

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20), tricky_text
)
yaml_values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
config_like = st.dictionaries(
    st.sampled_from([*sorted(ALLOWED), "sysfs-root", "bogus"]), yaml_values, max_size=5
)


def _load(content: bytes) -> dict[str, Any] | None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "nvwatch.yaml"
        path.write_bytes(content)
        try:
            return load_config_file(path, ALLOWED)
        except CONFIG_ERRORS as exc:
            message = str(exc)
            assert str(path) in message  # every load error names the file
            assert "\n" not in message  # in one line
            return None


@FUZZ
@given(st.binary(max_size=200))
def test_any_bytes(content: bytes) -> None:
    _load(content)


@FUZZ
@given(st.one_of(yaml_values, config_like))
def test_any_yaml(document: Any) -> None:
    loaded = _load(yaml.safe_dump(document, allow_unicode=True).encode())
    if loaded is not None:
        assert set(loaded) <= ALLOWED


@FUZZ
@given(st.text(max_size=200))
def test_any_text(text: str) -> None:
    _load(text.encode("utf-8", errors="surrogatepass"))


@FUZZ
@given(near(["0.0.0.0:9477", ":9477", "[::1]:9477", "127.0.0.1:0", "host:65535"]))
def test_parse_listen(text: str) -> None:
    try:
        host, port = parse_listen(text)
    except CONFIG_ERRORS:
        return
    assert 0 <= port <= 65535 and isinstance(host, str)


@FUZZ
@given(near(["nvml,infiniband,host", "host", " nvml , host "]) | st.lists(st.text(max_size=10)))
def test_parse_sources(value: str | list[str]) -> None:
    try:
        assert parse_sources(value)
    except CONFIG_ERRORS:
        return
