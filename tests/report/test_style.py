"""The shared plotting style: units as a reader expects them, stable colours, PNG output."""

from __future__ import annotations

import base64
import io
import math
import subprocess
import sys

import pytest
from PIL import Image

from nvwatch.report import style, units


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (312.0, "W", "312 W"),
        (3200.0, "W", "3.2 kW"),  # a DGX-1's system power
        (98_500.0, "W", "98.5 kW"),
        (12.5, "kW", "12.5 kW"),
        (1234.6, "kWh", "1,235 kWh"),
        (4.56, "kWh", "4.56 kWh"),
        (84.96, "°C", "85.0 °C"),
        (1.25e10, "bytes/s", "12.5 GB/s"),  # one EDR port, 100 Gb/s
        (512.0, "bytes/s", "512 B/s"),
        (0.4567, "ratio", "45.7 %"),
        (1.0, "ratio", "100.0 %"),
        (5952.4, "h", "5,952 h"),
        (None, "W", units.MISSING),
        (math.nan, "ratio", units.MISSING),
    ],
)
def test_values_print_in_their_unit(value: float | None, unit: str, text: str) -> None:
    assert units.fmt(value, unit) == text


def test_an_unknown_unit_prints_three_digits_and_its_name() -> None:
    assert units.fmt(2.34567, "links") == "2.35 links"


def test_each_known_node_class_has_its_own_colour() -> None:
    colours = list(style.CLASS_COLOURS.values())
    assert len(set(colours)) == len(colours)
    from nvwatch.mixin.config import DEFAULT_NODE_CLASSES

    assert {c.name for c in DEFAULT_NODE_CLASSES} <= set(style.CLASS_COLOURS)


def test_an_unknown_class_keeps_its_colour_across_processes() -> None:
    code = "from nvwatch.report.style import class_colour; print(class_colour('lab-rtx6000'))"
    seen = {
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        for _ in range(2)
    }
    assert seen == {style.class_colour("lab-rtx6000")}
    assert style.class_colour("lab-rtx6000").startswith("#")


def test_a_figure_becomes_a_png_that_decodes_with_its_pixels_drawn() -> None:
    fig = style.new_figure(4, 2)
    axes = fig.add_subplot()
    axes.plot([0, 1, 2], [0.2, 0.9, 0.4], color=style.class_colour("dgx-a100"))
    style.unit_axis(axes, "ratio")
    png = style.figure_png(fig)
    image = Image.open(io.BytesIO(png))
    assert image.format == "PNG"
    assert image.size == (4 * 110, 2 * 110)  # savefig.dpi of the house style
    # the line's colour (dgx-a100 #0072B2) is among the pixels
    assert (0x00, 0x72, 0xB2) in {px[:3] for _, px in image.convert("RGB").getcolors(1 << 16)}
    uri = style.data_uri(png)
    assert uri.startswith("data:image/png;base64,")
    assert base64.b64decode(uri.split(",", 1)[1]) == png


def test_tick_labels_carry_the_unit() -> None:
    fig = style.new_figure(4, 2)
    axes = fig.add_subplot()
    axes.plot([0, 1], [0, 3000])
    style.unit_axis(axes, "W")
    fig.canvas.draw()
    labels = [t.get_text() for t in axes.get_yticklabels()]
    assert "3 kW" in labels
    assert "0 W" in labels


@pytest.mark.parametrize("hidden", ["matplotlib", "numpy"])
def test_without_the_extra_the_agent_imports_and_plotting_says_how_to_install(
    hidden: str,
) -> None:
    # None in sys.modules makes `import <hidden>` raise ImportError
    code = (
        f"import sys; sys.modules[{hidden!r}] = None\n"
        "import nvwatch.agent.cli, nvwatch.report.style as s\n"
        "try:\n    s.require()\nexcept s.PlottingUnavailable as e:\n    print(e)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == style.MISSING_EXTRA.format(missing=hidden)
    assert "pip install 'nvwatch[report]'" in out


def test_a_rack_chart_can_give_each_rack_its_own_colour() -> None:
    from nvwatch.report.sections.power import SHOWN_RACKS

    assert len(set(style.RACK_COLOURS)) == len(style.RACK_COLOURS) >= SHOWN_RACKS
    assert style.NEUTRAL not in style.RACK_COLOURS
    assert style.LIMIT_COLOUR not in style.RACK_COLOURS
