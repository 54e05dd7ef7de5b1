"""The one duration grammar, shared by agent flags and the mixin config."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from nvwatch.common.durations import (
    DurationBounds,
    DurationError,
    parse_duration,
    prometheus_duration,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 30.0),
        ("2.5", 2.5),
        ("500ms", 0.5),
        ("2.5s", 2.5),
        ("1.5m", 90.0),
        ("1h30m", 5400.0),
        ("1d12h", 129600.0),
        ("1w", 604800.0),
        ("1y", 31536000.0),
        ("1m30s500ms", 90.5),
        (" 5s ", 5.0),
        (7, 7.0),
    ],
)
def test_accepts_agent_and_prometheus_forms(text: str | int, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    "text", ["", "s", "5x", "30m1h", "5s5s", "1h 30m", "-5s", "0", "0s", "five", "5S", True]
)
def test_rejects_with_one_line(text: object) -> None:
    with pytest.raises(DurationError) as info:
        parse_duration(text, "interval")  # type: ignore[arg-type]
    message = str(info.value)
    assert "interval" in message and "\n" not in message


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(2.5, "2s500ms"), (5400, "1h30m"), (60, "1m"), (0.001, "1ms"), (86400 * 8, "1w1d")],
)
def test_prometheus_form_is_whole_units_largest_first(seconds: float, text: str) -> None:
    assert prometheus_duration(seconds) == text
    # and it reads back to the same number of seconds
    assert parse_duration(text) == pytest.approx(seconds)


def test_prometheus_form_refuses_sub_millisecond() -> None:
    with pytest.raises(DurationError):
        prometheus_duration(0.0001)


@pytest.mark.parametrize(
    "value", ["9" * 400, "9" * 400 + "y", float("inf"), float("nan"), [5], {"every": 5}, None]
)
def test_rejects_what_is_no_finite_duration(value: object) -> None:
    # "9"*400 reads as float infinity; lists, mappings and null come from YAML files
    with pytest.raises(DurationError) as info:
        parse_duration(value, "interval")  # type: ignore[arg-type]
    assert "\n" not in str(info.value)


def test_bounds_are_inclusive_and_stated_in_the_error() -> None:
    bounds = DurationBounds(0.1, 3600.0)
    assert str(bounds) == "100ms to 1h"
    assert parse_duration("100ms", "interval", bounds) == 0.1
    assert parse_duration("1h", "interval", bounds) == 3600.0
    for text in ("99ms", "1h1ms", "99999999999h"):
        with pytest.raises(DurationError, match=f"invalid interval '{text}': must be from 100ms"):
            parse_duration(text, "interval", bounds)


def test_prometheus_form_refuses_what_it_cannot_write() -> None:
    for seconds in (float("inf"), float("nan"), 1e306):
        with pytest.raises(DurationError):
            prometheus_duration(seconds)


@pytest.mark.parametrize(
    "text",
    [
        "１s",  # FULLWIDTH DIGIT ONE: \d took it, and float() reads it as 1
        "1.５s",
        "٣m",  # ARABIC-INDIC DIGIT THREE
        "²s",  # str.isdigit() is true of superscripts
        "１",
        "\u30005s",  # an IDEOGRAPHIC SPACE around the number: str.strip() dropped it
        "5s\u00a0",
    ],
)
def test_only_ascii_digits_and_spaces_are_a_duration(text: str) -> None:
    with pytest.raises(DurationError) as info:
        parse_duration(text, "interval")
    assert "\n" not in str(info.value)


def test_a_long_duration_is_refused_quickly_and_shown_bounded() -> None:
    # before: the term regex searched on from every digit (minutes), and the message
    # quoted all 100,001 characters
    started = time.monotonic()
    with pytest.raises(DurationError) as info:
        parse_duration("5" * 100_000 + "q", "interval")
    assert time.monotonic() - started < 2
    assert "(100,001 characters)" in str(info.value) and len(str(info.value)) < 300


def test_an_int_past_a_float_is_no_finite_duration() -> None:
    with pytest.raises(DurationError, match="finite"):
        parse_duration(10**400, "interval")  # float() of it raised OverflowError


@pytest.mark.parametrize(
    "args",
    [
        ["--sources", "host", "--settle", "１s"],
        ["--simulate", "dgx-h100", "--sources", "nvml", "--scenario", "gpu-lost@1,from=１s"],
        ["--simulate", "dgx-h100", "--sources", "nvml", "--scenario", "gpu-lost@１"],
        ["--simulate", "dgx-h100", "--sources", "nvml", "--scenario", "gpu-lost@²"],
    ],
    ids=["settle", "scenario-from", "fullwidth-gpu", "superscript-gpu"],
)
def test_non_ascii_digits_are_refused_by_the_command(args: list[str]) -> None:
    # before: '１s' settled for a second, gpu-lost@１ lost GPU 1, and gpu-lost@² ended in
    # int()'s own "invalid literal for int() with base 10: '²'"
    completed = subprocess.run(
        [sys.executable, "-m", "nvwatch.agent.cli", "dump", "--settle", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 2, completed.stderr[-1000:]
    errors = [line for line in completed.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and errors[0].startswith("nvwatch: error: "), errors
    assert args[-1] in errors[0] and "int()" not in errors[0]


def test_help_says_a_bare_number_is_seconds() -> None:
    # `--interval 5` is 5 s (the grammar's first case above); --help used to promise a
    # unit every time, leaving a reader to guess what a bare number means
    completed = subprocess.run(
        [sys.executable, "-m", "nvwatch.agent.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr
    words = " ".join(completed.stdout.split())
    interval = words[words.index("--interval DURATION") :].split(" --")[0]
    assert "a number alone is seconds (5 = 5s)" in interval, interval


@pytest.mark.parametrize(
    ("args", "env", "line"),
    [
        (["--config", "/nonexistent/nvwatch.yml"], {}, "--config: cannot read config file"),
        ([], {"NVWATCH_CONFIG": "/nonexistent/nvwatch.yml"}, "NVWATCH_CONFIG (--config): "),
        (["--format", "yaml"], {}, "--format: 'yaml' is not one of"),
    ],
)
def test_a_bad_value_names_its_flag_or_variable_without_clicks_prefix(
    args: list[str], env: dict[str, str], line: str
) -> None:
    # click's own: "Invalid value for '--config' (env var: 'NVWATCH_CONFIG'): ..."
    completed = subprocess.run(
        [sys.executable, "-m", "nvwatch.agent.cli", "dump", "--settle", "0", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("NVWATCH_")}, **env},
    )
    assert completed.returncode == 2, completed.stderr
    (error,) = completed.stderr.splitlines()
    assert error.startswith(f"nvwatch: error: {line}"), error
    assert "Invalid value" not in error
