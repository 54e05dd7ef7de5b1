"""The BMC config: ipmi_exporter's module file accepted as it is, and every mistake in it
one line naming the file and the key.

The files here are written the way ipmi_exporter's documentation writes them (its
ipmi_remote.yml example); the file the peer test hands to both exporters is in
tests/bmc/test_peer_exporter.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from nvwatch.agent.config import ConfigError
from nvwatch.agent.sources.bmc.config import load_bmc_config

# ipmi_exporter's remote example, as its users have it (modules, FreeIPMI options)
EXPORTER_EXAMPLE = """\
modules:
  default:
    user: "default_user"
    pass: "example_pw"
    driver: "LAN_2_0"
    privilege: "user"
    timeout: 10000
    collectors:
    - bmc
    - ipmi
    - chassis
    exclude_sensor_ids:
    - 2
    - 29
  dcmi:
    user: "admin_user"
    pass: "another_pw"
    privilege: "admin"
    driver: "LAN_2_0"
    collectors:
    - dcmi
  special:
    user: "some_user"
    pass: "secret_pw"
    privilege: "admin"
    collectors: [ipmi, sel]
    workaround_flags:
    - discretereading
    custom_args:
      ipmi:
      - "--bridge-sensors"
"""


def _write(tmp_path: Path, text: str, name: str = "ipmi.yml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _error(path: Path) -> str:
    with pytest.raises(ConfigError) as raised:
        load_bmc_config(path)
    message = str(raised.value)
    assert "\n" not in message, message
    assert str(path) in message, message
    return message


def test_the_exporters_own_file_is_accepted_as_it_is(tmp_path: Path) -> None:
    config = load_bmc_config(_write(tmp_path, EXPORTER_EXAMPLE))
    assert list(config.modules) == ["default", "dcmi", "special"]
    default = config.modules["default"]
    assert (default.user, default.password, default.privilege) == (
        "default_user",
        "example_pw",
        "user",
    )
    assert default.timeout_s == 10.0  # ipmi_exporter's timeout is in milliseconds
    assert default.collectors == {"bmc", "ipmi", "chassis"}
    assert default.exclude_sensor_ids == {2, 29}
    assert config.modules["dcmi"].collectors == {"dcmi"}


def test_what_nvwatch_does_not_use_is_listed(tmp_path: Path) -> None:
    config = load_bmc_config(_write(tmp_path, EXPORTER_EXAMPLE))
    assert set(config.unused_keys) == {
        "modules.default.collectors.bmc",
        "modules.default.collectors.chassis",
        "modules.special.collectors.sel",
        "modules.special.workaround_flags",
        "modules.special.custom_args",
    }


def test_defaults_are_freeipmis_and_the_exporters(tmp_path: Path) -> None:
    module = load_bmc_config(_write(tmp_path, "modules: {m: {user: u, pass: p}}")).modules["m"]
    assert module.privilege == "operator"  # FreeIPMI's default privilege level
    assert module.timeout_s == 20.0  # FreeIPMI's default session timeout
    assert module.collectors == {"ipmi", "dcmi", "bmc", "chassis"}  # ipmi_exporter's
    assert module.inlet_pattern is None
    assert module.exhaust_pattern  # exhaust air has no entity id: named by pattern


def test_password_file_is_its_first_line(tmp_path: Path) -> None:
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "bmc").write_text("s3cret\nsecond line ignored\n")
    # relative to the config file's folder, as Prometheus resolves its files
    path = _write(tmp_path, "modules: {m: {user: u, password_file: secrets/bmc}}")
    assert load_bmc_config(path).modules["m"].password == "s3cret"


def test_patterns_are_ours(tmp_path: Path) -> None:
    text = "modules: {m: {inlet_pattern: '(?i)ambient', exhaust_pattern: '(?i)rear'}}"
    module = load_bmc_config(_write(tmp_path, text)).modules["m"]
    assert (module.inlet_pattern, module.exhaust_pattern) == ("(?i)ambient", "(?i)rear")


@pytest.mark.parametrize("driver", ["LAN_2_0", "lan_2_0"])
def test_lan_2_0_in_any_case(tmp_path: Path, driver: str) -> None:
    assert load_bmc_config(_write(tmp_path, f"modules: {{m: {{driver: {driver}}}}}")).modules


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("modules: {m: {driver: LAN}}", "modules.m.driver: 'LAN' (IPMI 1.5) is not supported"),
        ("modules: {m: {driver: OPEN}}", "modules.m.driver: 'OPEN' (not a LAN driver)"),
        ("modules: {m: {pasword: x}}", "modules.m: unknown key pasword"),
        ("modules: {m: {timeout: 10s}}", "modules.m.timeout: '10s': expected milliseconds"),
        ("modules: {m: {timeout: 0}}", "modules.m.timeout: 0: expected milliseconds"),
        ("modules: {m: {privilege: root}}", "modules.m.privilege: 'root': choose from"),
        ("modules: {m: {collectors: [ipmi, smart]}}", "unknown collector 'smart'"),
        ("modules: {m: {exclude_sensor_ids: [two]}}", "'two' is not an SDR record id"),
        ("modules: {m: {inlet_pattern: '(unclosed'}}", "modules.m.inlet_pattern: '(unclosed'"),
        ("modules: {m: {pass: 123456789012345678901}}", "longer than IPMI 2.0's 20 bytes"),
        ("modules: {m: {user: a-very-long-user-name}}", "modules.m.user: longer than IPMI's 16"),
        ("modules: {m: {pass: x, password_file: y}}", "give either pass or password_file"),
        ("modules: {m: [ipmi]}", "modules.m: expected a mapping"),
        ("modules: {}", "no module defined"),
        ("targets: [a]", "expected `modules:`"),
        ("modules: {m: {}}\nmodule: {}", "unknown key module"),
    ],
)
def test_a_mistake_is_one_line_naming_file_and_key(
    tmp_path: Path, text: str, expected: str
) -> None:
    assert expected in _error(_write(tmp_path, text))


def test_a_missing_password_file(tmp_path: Path) -> None:
    path = _write(tmp_path, "modules: {m: {password_file: /nonexistent/bmc-password}}")
    message = _error(path)
    assert "modules.m.password_file: cannot read /nonexistent/bmc-password" in message


def test_a_password_file_that_is_a_folder(tmp_path: Path) -> None:
    (tmp_path / "folder").mkdir()
    assert "cannot read" in _error(_write(tmp_path, "modules: {m: {password_file: folder}}"))


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file of mode 000")
def test_a_password_file_not_readable(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("pw\n")
    secret.chmod(0)
    message = _error(_write(tmp_path, "modules: {m: {password_file: secret}}"))
    assert "Permission denied" in message


def test_an_empty_password_file(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("\n")
    assert "first line is empty" in _error(_write(tmp_path, "modules: {m: {password_file: empty}}"))


def test_an_unreadable_config_file(tmp_path: Path) -> None:
    message = _error(tmp_path / "missing.yml")
    assert message.startswith("cannot read BMC config")
