"""Fuzz the web config loader: a WebConfig or a WebConfigError (one line naming the file).

`nvwatch serve` turns a WebConfigError (a ConfigError) into one line and exit 2;
anything else would be a traceback at start-up. Certificates and hashes are not generated: the
point is the loader's handling of shapes and values, not TLS or bcrypt.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given
from hypothesis import strategies as st

from nvwatch.agent.webconfig import WebConfigError, load_web_config

from .strategies import FUZZ, tricky_text

KEYS = ["tls_server_config", "http_server_config", "basic_auth_users", "rate_limit", "bogus"]
INNER_KEYS = [
    "cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version",
    "max_version", "cipher_suites", "headers", "http2", "interval", "burst",
    "X-Frame-Options", "Strict-Transport-Security", "prometheus",
]  # fmt: skip

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=20), tricky_text
)
values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda children: (
        st.lists(children, max_size=3)
        | st.dictionaries(st.sampled_from(INNER_KEYS) | st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=10,
)
documents = st.dictionaries(st.sampled_from(KEYS), values, max_size=4) | values


def _load(content: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "web.yml"
        path.write_bytes(content)
        try:
            load_web_config(path)
        except WebConfigError as exc:
            assert str(path) in str(exc)
            assert "\n" not in str(exc)


@FUZZ
@given(st.binary(max_size=200))
def test_any_bytes(content: bytes) -> None:
    _load(content)


@FUZZ
@given(documents)
def test_any_yaml(document: Any) -> None:
    _load(yaml.safe_dump(document, allow_unicode=True).encode())
