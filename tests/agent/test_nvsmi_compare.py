from __future__ import annotations

from pathlib import Path

from nvwatch.agent.nvsmi_compare import PAIRINGS, compare, format_rows, nvidia_smi_command

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _value(text: str, line_start: str) -> float:
    line = next(line for line in text.splitlines() if line.startswith(line_start))
    return float(line.rsplit(" ", 1)[1])


def _smi_row(text: str, gpu: str) -> list[str]:
    """What nvidia-smi would print for the golden dgx-h100 GPU, in its units and formats.

    Written out by hand per nvidia-smi field (not derived from the catalogue's scales), so
    a wrong scale or a wrong series in the catalogue's pairs makes the comparison fail.
    """

    def v(metric: str, labels: str = "") -> float:
        return _value(text, f'{metric}{{{labels}gpu="{gpu}"')

    by_query = {
        "memory.total": str(round(v("nvwatch_gpu_memory_total_bytes") / 2**20)),
        "memory.used": str(round(v("nvwatch_gpu_memory_used_bytes") / 2**20)),
        "power.draw": f"{v('nvwatch_gpu_power_watts') + 3.2:.2f}",  # read a moment later
        "enforced.power.limit": f"{v('nvwatch_gpu_power_limit_watts'):.2f}",
        "power.default_limit": f"{v('nvwatch_gpu_power_tdp_watts'):.2f}",
        "temperature.gpu": str(
            int(_value(text, f'nvwatch_gpu_temperature_celsius{{gpu="{gpu}",sensor="gpu"'))
        ),
        "temperature.memory": str(
            int(_value(text, f'nvwatch_gpu_temperature_celsius{{gpu="{gpu}",sensor="memory"'))
        ),
        "clocks.sm": str(int(v("nvwatch_gpu_clock_hertz", 'clock="sm",') / 1e6)),
        "clocks.mem": str(int(v("nvwatch_gpu_clock_hertz", 'clock="memory",') / 1e6)),
        "clocks.max.sm": str(int(v("nvwatch_gpu_clock_max_hertz", 'clock="sm",') / 1e6)),
        "utilization.gpu": str(round(v("nvwatch_gpu_utilization_ratio") * 100)),
        "pcie.link.gen.max": str(
            int(_value(text, f'nvwatch_gpu_pcie_link_generation{{gpu="{gpu}",kind="max"'))
        ),
        "pcie.link.width.max": str(
            int(_value(text, f'nvwatch_gpu_pcie_link_width{{gpu="{gpu}",kind="max"'))
        ),
        "ecc.errors.uncorrected.volatile.total": "0",
    }
    assert set(by_query) == {p.query for p in PAIRINGS}, "a pair was added or removed"
    return [gpu, *(by_query[p.query] for p in PAIRINGS)]


def test_agreeing_values_pass_and_a_wrong_one_is_named() -> None:
    text = (GOLDEN / "dgx-h100.prom").read_text()
    good = _smi_row(text, "0")
    bad = _smi_row(text, "1")
    queries = [p.query for p in PAIRINGS]
    bad[1 + queries.index("enforced.power.limit")] = "650.00"  # differs from nvwatch
    rows = compare(text, ",".join(good) + "\n" + ",".join(bad) + "\n")
    assert len(rows) == 2 * len(PAIRINGS)
    failing = [r for r in rows if not r.ok]
    assert [(r.gpu, r.query) for r in failing] == [("1", "enforced.power.limit")]
    assert "| NO |" in format_rows(rows)


def test_not_supported_must_be_absent_not_zero() -> None:
    text = (GOLDEN / "geforce-workstation.prom").read_text()
    row = ["0", *(["[N/A]"] * len(PAIRINGS))]
    rows = {r.query: r for r in compare(text, ",".join(row) + "\n")}
    # GeForce has no memory temperature and no ECC: absent in nvwatch, so that agrees
    assert rows["temperature.memory"].ok
    assert rows["ecc.errors.uncorrected.volatile.total"].ok
    # but nvwatch does export a GPU temperature, which nvidia-smi here claims is N/A
    assert not rows["temperature.gpu"].ok


def test_command_asks_for_every_paired_field() -> None:
    command = nvidia_smi_command()
    for pairing in PAIRINGS:
        assert pairing.query in command[1]
