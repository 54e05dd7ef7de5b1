"""A key given twice is refused, by every file the agent reads through its one loader.

Before, PyYAML kept the last: a user listed twice in `basic_auth_users` logged in with
the second hash, a second `rate_limit` turned the limiter off, and nothing said so.
Go's yaml.v2 (UnmarshalStrict, as exporter-toolkit reads the same web config) refuses
both, and docs/security.md promises Go's meaning or a refusal. From outside first: real
`nvwatch` processes, which must answer with one line naming the file, the key and both
lines, and exit 2, where before `serve` started (and `subprocess.run` timed out).
"""

from __future__ import annotations

from pathlib import Path

import bcrypt
import pytest

from nvwatch.agent.config import ConfigError, load_config_file
from nvwatch.common.yaml_safe import load_yaml_text
from tests.agent.refusals import refusal_line

SERVE = ["serve", "--sources", "host", "--listen", "127.0.0.1:0"]


def _hash(password: bytes) -> str:
    return bcrypt.hashpw(password, bcrypt.gensalt(4)).decode()


def test_a_web_config_user_given_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    path.write_text(
        f"basic_auth_users:\n  prometheus: '{_hash(b'old')}'\n  prometheus: '{_hash(b'new')}'\n"
    )
    line = refusal_line([*SERVE, "--web-config", str(path)])
    assert f"web config {path}: basic_auth_users.prometheus: duplicate key" in line
    assert "on line 2 and again on line 3" in line


def test_a_second_rate_limit_that_would_turn_it_off_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "web.yml"
    path.write_text("rate_limit:\n  interval: 1s\n  burst: 10\nrate_limit:\n  interval: 0\n")
    line = refusal_line([*SERVE, "--web-config", str(path)])
    assert f"web config {path}: rate_limit: duplicate key" in line
    assert "on line 1 and again on line 4" in line


def test_an_agent_config_key_given_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "nvwatch.yaml"
    path.write_text("sources: [host]\ninterval: 5s\nsources: [nvml, host]\n")
    line = refusal_line(["dump", "--settle", "0", "--config", str(path)])
    assert f"config file {path}: sources: duplicate key, on line 1 and again on line 3" in line


def test_an_agent_config_option_spelt_both_ways_is_refused(tmp_path: Path) -> None:
    # the loader sees two keys; the agent reads one option from both
    path = tmp_path / "nvwatch.yaml"
    path.write_text("sysfs-root: /sys\nsources: host\nsysfs_root: /host/sys\n")
    line = refusal_line(["dump", "--settle", "0", "--config", str(path)])
    assert f"config file {path}: sysfs_root: given twice, as sysfs-root and sysfs_root" in line


def test_a_bmc_module_given_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "ipmi.yml"
    path.write_text(
        "modules:\n  dgx:\n    user: monitor\n    privilege: user\n"
        "  dgx:\n    user: admin\n    privilege: admin\n"
    )
    line = refusal_line([*SERVE, "--bmc-config", str(path)])
    assert f"BMC config {path}: modules.dgx: duplicate key, on line 2 and again on line 5" in line


def test_an_inventory_node_key_given_twice_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "nodes:\n"
        "  - hostname: dgx-001\n    address: 10.0.0.1\n    node_class: dgx\n    rack: r1\n"
        "    address: 10.0.0.2\n"
    )
    line = refusal_line(["inventory", "--in", str(path), "--out", str(tmp_path / "sd")])
    assert f"inventory {path}: nodes[0].address: duplicate key, on line 3 and again on line 6" in (
        line
    )
    assert not (tmp_path / "sd").exists()


def _error(text: str) -> str:
    with pytest.raises(ConfigError) as raised:
        load_yaml_text(text, Path("/etc/nvwatch/web.yml"), "web config")
    message = str(raised.value)
    assert message.startswith("web config /etc/nvwatch/web.yml: ") and "\n" not in message
    return message


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        # at any depth, in block and in flow style (both on one line: columns too)
        ("a:\n  - b: {c: 1, d: 2, c: 3}\n", "a[0].b.c: duplicate key, on line 2, column 9 and "
         "again on line 2, column 21"),
        # a merge key counts its keys as the mapping's: given again, explicitly or merged
        ("<<: {a: 1}\nb: 2\na: 3\n", "a: duplicate key, on line 1 and again on line 3"),
        ("<<: [{a: 1}, {a: 2}]\n", "a: duplicate key, on line 1, column 7 and again on line 1,"),
        ("<<: {b: 1}\n<<: {c: 1}\n", "<<: duplicate key, on line 1 and again on line 2"),
        ("<<: {<<: {x: 1}, x: 2}\n", "x: duplicate key"),
        # keys that are one once read are one key: a dict would keep only the last
        ("1: a\n0x1: b\n", "0x1: duplicate key, on line 1 and again on line 2 ('1' and '0x1' "
         "are the same key)"),
        ("yes: a\ntrue: b\n", "true: duplicate key, on line 1 and again on line 2 ('yes' and "
         "'true' are the same key)"),
        ("1: a\n1.0: b\n", "('1' and '1.0' are the same key)"),
        ("'a': 1\n\"a\": 2\n", "a: duplicate key, on line 1 and again on line 2"),
    ],
    ids=["nested-flow", "merged-then-own", "two-merged", "two-merge-keys", "nested-merge",
         "int-bases", "yaml-1.1-bools", "int-and-float", "quoting"],
)  # fmt: skip
def test_a_duplicate_key_is_named_with_its_path_and_both_places(text: str, fragment: str) -> None:
    assert fragment in _error(text)


def test_keys_that_differ_and_merges_without_overlap_still_load() -> None:
    path = Path("/etc/nvwatch/web.yml")
    assert load_yaml_text("a: 1\nA: 2\n'1': 3\n1: 4\n", path) == {"a": 1, "A": 2, "1": 3, 1: 4}
    assert load_yaml_text("<<: [{a: 1}, {b: 2}]\nc: 3\n", path) == {"a": 1, "b": 2, "c": 3}
    assert load_yaml_text("x: [{a: 1}, {a: 2}]\n", path) == {"x": [{"a": 1}, {"a": 2}]}


def test_load_config_file_refuses_a_key_given_twice(tmp_path: Path) -> None:
    path = tmp_path / "nvwatch.yaml"
    path.write_text("interval: 5s\ninterval: 0.1s\n")
    with pytest.raises(ConfigError, match="interval: duplicate key, on line 1 and again on line 2"):
        load_config_file(path, {"interval"})
