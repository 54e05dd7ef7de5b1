"""--bmc-allow: which targets /probe may send IPMI to, from the flag's entries and from
file_sd files re-read when they change; malformed entries are one line."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from nvwatch.agent.inventory import write_json_atomic
from nvwatch.agent.inventory_bmc import bmc_target_group
from nvwatch.agent.server.probe_allow import (
    MAX_FILE_BYTES,
    RECHECK_S,
    ProbeAllowlist,
    parse_allow,
)
from nvwatch.common.yaml_safe import ConfigError

NODE = {"cluster": "c1", "rack": "r1", "node_class": "gpu", "instance": "node-1"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def after_recheck(self) -> None:
        self.now += RECHECK_S


def _allowlist(text: str, clock: Clock | None = None) -> ProbeAllowlist:
    return ProbeAllowlist(parse_allow(text), clock or Clock())


def test_addresses_and_networks_of_both_families_allow_what_they_cover() -> None:
    allow = _allowlist("10.0.0.5, 10.1.0.0/16, fd00::5, fd00:1::/64")
    for host in ("10.0.0.5", "10.1.200.3", "fd00::5", "fd00:1::77", "::ffff:10.1.0.9"):
        assert allow.permits(host), host
    for host in ("10.0.0.6", "10.2.0.1", "fd00::6", "fd00:2::1", "::ffff:10.0.0.6", "127.0.0.1"):
        assert not allow.permits(host), host


def test_a_name_is_allowed_only_as_written_never_by_what_it_resolves_to() -> None:
    allow = _allowlist("bmc-7.mgmt, 127.0.0.1")
    assert allow.permits("bmc-7.mgmt") and allow.permits("BMC-7.mgmt.")
    # localhost is 127.0.0.1, which is allowed: but resolving it would be a DNS query
    assert not allow.permits("localhost")
    assert not allow.permits("bmc-8.mgmt")
    # numeric spellings the resolver reads as 127.0.0.1 are names, and not listed
    assert not allow.permits("0x7f000001") and not allow.permits("127.1")


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("10.0.0.0/33", "is not one of IP addresses, networks"),
        ("10.0.0.5/16", "has host bits set"),
        ("10.0.0.5:623", "is not one of"),
        ("bmc_1.mgmt", "is not one of"),
        ("127.1", "is not one of"),  # the resolver reads it as 127.0.0.1
        ("0x7f000001", "is not one of"),
        ("-bmc.mgmt", "is not one of"),
        (" , ", "no entry"),
        ("10.0.0.5,,fd00::/64", "'' is not one of"),
    ],
)
def test_a_malformed_entry_is_one_line(text: str, says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_allow(text)
    assert says in str(raised.value) and "\n" not in str(raised.value)


def _write_bmcs(path: Path, *bmcs: str) -> None:
    # as `nvwatch inventory` writes them: whole, by rename
    write_json_atomic(path, [bmc_target_group(bmc, NODE) for bmc in bmcs])


def test_file_sd_targets_are_allowed_and_read_again_when_the_files_change(
    tmp_path: Path,
) -> None:
    _write_bmcs(tmp_path / "bmc-gpu.json", "10.9.0.1", "[fd00::9]:6230", "bmc-9.mgmt:623")
    clock = Clock()
    allow = _allowlist(f"{tmp_path}/bmc-*.json", clock)
    assert all(allow.permits(h) for h in ("10.9.0.1", "fd00::9", "bmc-9.mgmt"))
    assert not allow.permits("10.9.0.2")
    # an inventory run: one BMC replaced, a class added
    _write_bmcs(tmp_path / "bmc-gpu.json", "10.9.0.2")
    _write_bmcs(tmp_path / "bmc-cpu.json", "10.9.0.3")
    assert allow.permits("10.9.0.1")  # not looked at again within RECHECK_S
    clock.after_recheck()
    assert allow.permits("10.9.0.2") and allow.permits("10.9.0.3")
    assert not allow.permits("10.9.0.1")
    # a class removed: its BMCs are no longer allowed
    os.unlink(tmp_path / "bmc-cpu.json")
    clock.after_recheck()
    assert not allow.permits("10.9.0.3") and allow.permits("10.9.0.2")


def test_a_file_turned_bad_keeps_what_it_allowed_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "bmc-gpu.json"
    _write_bmcs(path, "10.9.0.1")
    clock = Clock()
    allow = _allowlist(str(path), clock)
    path.write_text('[{"targets": ["10.9.0.2"')  # cut short
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            clock.after_recheck()
            assert allow.permits("10.9.0.1") and not allow.permits("10.9.0.2")
    warned = [r.getMessage() for r in caplog.records if "keeping what it allowed" in r.getMessage()]
    assert len(warned) == 1 and str(path) in warned[0]


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "cannot read --bmc-allow file"),
        ('{"targets": ["10.0.0.1"]}', "expected file_sd's list"),
        ("[{", "not JSON"),
        (" " * (MAX_FILE_BYTES + 1), "larger than the limit"),
    ],
)
def test_a_bad_file_at_start_is_one_line(tmp_path: Path, content: str | None, says: str) -> None:
    path = tmp_path / "bmc-gpu.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError) as raised:
        _allowlist(str(path))
    assert says in str(raised.value) and "\n" not in str(raised.value)


def test_odd_file_sd_targets_are_skipped_not_taken_for_names(tmp_path: Path) -> None:
    path = tmp_path / "bmc-gpu.json"
    path.write_text(json.dumps([{"targets": ["127.1", "10.9.0.1", 7, "a b"]}]))
    allow = _allowlist(str(path))
    assert allow.permits("10.9.0.1")
    assert not allow.permits("127.1")
