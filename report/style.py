"""The one plotting style of nvwatch's documents: headless matplotlib, colours, units.

The report and the dashboard previews draw with this, so a node class has the same
colour and a watt the same label in every picture. Figures are built with
`matplotlib.figure.Figure` (no pyplot state machine): nothing global, safe to draw from
any thread, and never a window.

matplotlib and numpy are an optional extra (`pip install 'nvwatch[report]'`); `require()`
turns their absence into one clear message.
"""

from __future__ import annotations

import base64
import io
import zlib
from typing import TYPE_CHECKING, Any

from nvwatch.report import units

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

MISSING_EXTRA = (
    "this command needs the report extra ({missing} is not installed): "
    "pip install 'nvwatch[report]' (or pip install matplotlib numpy)"
)


class PlottingUnavailable(RuntimeError):
    """matplotlib or numpy is not installed; the message says how to install them."""


def require() -> None:
    """Select the headless Agg backend and the house style; raise if the report extra
    (matplotlib, and numpy, which the report computes with) is missing.

    Called by a command before it imports anything of the report or the previews,
    which import numpy at module level."""
    try:
        import numpy  # noqa: F401
    except ImportError as err:
        raise PlottingUnavailable(MISSING_EXTRA.format(missing="numpy")) from err
    try:
        import matplotlib
    except ImportError as err:
        raise PlottingUnavailable(MISSING_EXTRA.format(missing="matplotlib")) from err
    # Agg: no display on a login node or in CI; force=False keeps a backend someone chose
    matplotlib.use("Agg")
    import matplotlib.style

    matplotlib.style.use(RC_PARAMS)


RC_PARAMS: dict[str, Any] = {
    "figure.dpi": 100,
    "savefig.dpi": 110,
    "font.size": 9,
    "axes.titlesize": 10,
    "axes.titleweight": "bold",
    "axes.titlelocation": "left",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "legend.fontsize": 8,
    "legend.frameon": False,
}

# Okabe-Ito and Tol colours: distinguishable with the common colour-vision deficiencies
# and in greyscale print. Fixed per known node class (= simulation profile) so a class
# keeps its colour across plots, reports and releases.
CLASS_COLOURS: dict[str, str] = {
    "dgx1-p100": "#E69F00",
    "dgx1-v100": "#56B4E9",
    "dgx-station": "#009E73",
    "dgx2": "#CC79A7",
    "dgx-a100": "#0072B2",
    "dgx-h100": "#D55E00",
    "hgx-h200": "#661100",  # Tol's dark red: the H100's orange-red family, darker
    "geforce-workstation": "#999933",
    "inference-t4": "#882255",
}
_FALLBACK_COLOURS = ("#332288", "#117733", "#44AA99", "#88CCEE", "#DDCC77", "#AA4499")
# Racks, one colour each (Paul Tol's "muted" qualitative scheme, also for colour-vision
# deficiencies), given out in the order a report asks for them (Context.rack_colour),
# so no two racks of one chart share a colour and a rack keeps its colour in every
# chart of the report. A node class is not a rack's colour: racks mix classes.
# Rose comes last: it is the nearest to the red of limits and budgets.
RACK_COLOURS = (
    "#332288", "#117733", "#88CCEE", "#882255", "#44AA99", "#999933", "#AA4499",
    "#DDCC77", "#CC6677",
)  # fmt: skip
NEUTRAL = "#555555"
# what a plot draws against: a limit, a budget, a threshold
LIMIT_COLOUR = "#C0392B"
WARN_COLOUR = "#E67E22"
OK_COLOUR = "#2E8B57"


def class_colour(name: str) -> str:
    """The colour of a node class; an unknown class gets a stable one from its name.

    crc32, not hash(): Python salts str hashes per process, and a class must keep its
    colour from one report to the next.
    """
    known = CLASS_COLOURS.get(name)
    if known is not None:
        return known
    return _FALLBACK_COLOURS[zlib.crc32(name.encode()) % len(_FALLBACK_COLOURS)]


def legend_of(axes: Axes) -> tuple[tuple[str, str], ...]:
    """(label, colour as #rrggbb) of each entry of the axes' legend, read from the drawn
    artists: what a reader of the picture sees, for the report's JSON and its tests."""
    from matplotlib.colors import to_hex

    entries = []
    for handle, label in zip(*axes.get_legend_handles_labels(), strict=True):
        colour = handle.get_color() if hasattr(handle, "get_color") else None
        if colour is None:  # a bar or histogram patch
            patches = getattr(handle, "patches", None) or [handle]
            colour = patches[0].get_facecolor()
        entries.append((label, to_hex(colour)))
    return tuple(entries)


def new_figure(width: float = 7.5, height: float = 3.0) -> Figure:
    """A figure sized in inches for an A4/Letter page column (7.5 in is the text width)."""
    require()
    from matplotlib.figure import Figure

    return Figure(figsize=(width, height), layout="constrained")


def unit_axis(axes: Axes, unit: str, axis: str = "y") -> None:
    """Tick labels in `unit` (a key of units.FORMATTERS: W, kWh, °C, bytes/s, ratio ...)."""
    from matplotlib.ticker import FuncFormatter

    show = units.FORMATTERS.get(unit)

    def tick(value: float, _position: int | None) -> str:
        if unit == "ratio":  # ticks at round percentages need no decimal
            return f"{100 * value:.0f} %"
        return show(value) if show is not None else f"{value:g}"

    target = axes.yaxis if axis == "y" else axes.xaxis
    target.set_major_formatter(FuncFormatter(tick))


def time_axis(axes: Axes) -> None:
    """Concise dates on x (day numbers, the month once): readable over 1 day to 90 days."""
    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    # matplotlib.dates has no annotations on these two constructors
    locator = AutoDateLocator(maxticks=8)  # type: ignore[no-untyped-call]
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(ConciseDateFormatter(locator))  # type: ignore[no-untyped-call]


def figure_png(fig: Figure) -> bytes:
    """The figure as PNG bytes (white background, so it prints and reads in dark mode)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", facecolor="white", metadata={"Software": "nvwatch"})
    return buffer.getvalue()


def data_uri(png: bytes, media_type: str = "image/png") -> str:
    """PNG bytes as a data: URI, so an <img> needs no file next to the HTML."""
    return f"data:{media_type};base64,{base64.b64encode(png).decode('ascii')}"
