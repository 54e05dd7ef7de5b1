from __future__ import annotations

from pathlib import Path

from agent.nvsmi_compare import PAIRINGS, compare, format_rows, nvidia_smi_command

GOLDEN = Path(__file__).resolve().parents[1] / "golden"


def _value(text: str, line_start: str) -> float:
    line = next(line for line in text.splitlines() if line.startswith(line_start))
    return float(line.rsplit(" ", 1)[1])


def _smi_row(text: str, gpu: str) -> list[str]:
    """What nvidia-smi would print for the golden dgx-h100 GPU, in its units."""

    def v(metric: str, labels: str = "") -> float:
        return _value(text, f'{metric}{{{labels}gpu="{gpu}"')

    return [
        gpu,
        str(round(v("nvwatch_gpu_memory_total_bytes") / 2**20)),
        str(round(v("nvwatch_gpu_memory_used_bytes") / 2**20)),
        f"{v('nvwatch_gpu_power_watts') + 3.2:.2f}",  # a reading taken a moment later
        f"{v('nvwatch_gpu_power_limit_watts'):.2f}",
        f"{v('nvwatch_gpu_power_tdp_watts'):.2f}",
        str(int(_value(text, f'nvwatch_gpu_temperature_celsius{{gpu="{gpu}",sensor="gpu"'))),
        str(int(_value(text, f'nvwatch_gpu_temperature_celsius{{gpu="{gpu}",sensor="memory"'))),
        str(int(v("nvwatch_gpu_clock_hertz", 'clock="sm",') / 1e6)),
        str(int(v("nvwatch_gpu_clock_hertz", 'clock="memory",') / 1e6)),
        str(int(v("nvwatch_gpu_clock_max_hertz", 'clock="sm",') / 1e6)),
        str(round(v("nvwatch_gpu_utilization_ratio") * 100)),
        str(int(_value(text, f'nvwatch_gpu_pcie_link_generation{{gpu="{gpu}",kind="max"'))),
        str(int(_value(text, f'nvwatch_gpu_pcie_link_width{{gpu="{gpu}",kind="max"'))),
        "0",
    ]


def test_agreeing_values_pass_and_a_wrong_one_is_named() -> None:
    text = (GOLDEN / "dgx-h100.prom").read_text()
    good = _smi_row(text, "0")
    bad = _smi_row(text, "1")
    bad[4] = "650.00"  # enforced limit differs from what nvwatch exported
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
