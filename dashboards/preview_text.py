"""Text that fits its place in a dashboard preview, as Grafana makes it fit.

Grafana never lets a panel's text run into other text: a stat's value is sized to its
panel, a table cell or a bar gauge's name ends in an ellipsis, a title too. The drawers
(dashboards/preview_panels.py) do the same with these: the width a string takes at a
font size (in points, measured on the font's outlines, so no renderer is needed), the
largest size within a floor at which strings fit, and a string shortened to a width.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.textpath import TextToPath

ELLIPSIS = "…"
# the renderer hints glyphs to whole pixels, which the outlines do not: a string drawn
# can be a little wider than measured
_SLACK = 1.04


@functools.lru_cache(maxsize=8192)
def text_width(text: str, size: float, weight: str = "normal") -> float:
    """How wide `text` is drawn at `size` points, in points."""
    from matplotlib.font_manager import FontProperties

    if not text:
        return 0.0
    width, _height, _descent = _measure().get_text_width_height_descent(
        text, FontProperties(size=size, weight=weight), ismath=False
    )
    return float(width) * _SLACK


@functools.cache
def _measure() -> TextToPath:
    from matplotlib.textpath import TextToPath

    return TextToPath()


def shorten(text: str, width: float, size: float, weight: str = "normal") -> str:
    """`text`, or as much of it as fits `width` points with an ellipsis after it; "" when
    not even the ellipsis fits."""
    if text_width(text, size, weight) <= width:
        return text
    low, high = 0, len(text)  # the longest prefix that fits is in [low, high)
    while low < high:
        middle = (low + high + 1) // 2
        if text_width(text[:middle].rstrip() + ELLIPSIS, size, weight) <= width:
            low = middle
        else:
            high = middle - 1
    shortened = text[:low].rstrip() + ELLIPSIS
    return shortened if text_width(shortened, size, weight) <= width else ""


def fitting_size(
    texts: Iterable[str], width: float, largest: float, floor: float, weight: str = "normal"
) -> float:
    """The largest size from `largest` down to `floor`, in half points, at which every
    one of `texts` is at most `width` points wide; `floor` when none is."""
    texts = list(texts)
    size = largest
    while size > floor:
        if all(text_width(t, size, weight) <= width for t in texts):
            return size
        size -= 0.5
    return floor


def axes_points(axes: Axes) -> tuple[float, float]:
    """The axes' width and height on the figure, in points."""
    dpi = axes.figure.dpi
    return 72 * axes.bbox.width / dpi, 72 * axes.bbox.height / dpi
