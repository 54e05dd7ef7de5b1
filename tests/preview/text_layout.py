"""Where a drawn dashboard preview's texts run into each other or out of their panel.

`text_problems` draws a figure of `nvwatch.dashboards.preview.build_figure` at the PNG's
resolution and measures what the renderer drew with matplotlib's own extents: two texts
of one panel that overlap, and a text that leaves its panel's cell of the grid (where it
would run into a neighbour's) are each a problem, in words; so is the dashboard's title
outside its band above the panels.

Only texts the renderer actually drew count: `Text.draw` is watched while the figure
draws, so a tick label matplotlib leaves out (outside the view, an empty string) or an
invisible text is not taken for one a reader sees.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from itertools import combinations
from typing import TYPE_CHECKING, Any

from nvwatch.dashboards.preview import TITLE_INCHES, PanelResult, figure_height, panel_box

if TYPE_CHECKING:
    from matplotlib.figure import Figure
    from matplotlib.text import Text
    from matplotlib.transforms import Bbox

# pixels two extents may share, or a text may stand past its cell: antialiasing's edge
TOLERANCE_PX = 1.0
DASHBOARD = -1  # what the figure's own texts (the dashboard's title) belong to


@contextmanager
def _watching_text(drawn: dict[int, Text]) -> Iterator[None]:
    """Every Text that reaches the renderer with something to show, while it runs."""
    from matplotlib.text import Text

    original = Text.draw

    def draw(self: Text, renderer: Any) -> None:
        alpha = self.get_alpha()
        if self.get_visible() and self.get_text().strip() and (alpha is None or alpha > 0):
            drawn[id(self)] = self
        original(self, renderer)

    Text.draw = draw  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        Text.draw = original  # type: ignore[method-assign]


def _owners(figure: Figure, results: list[tuple[dict[str, Any], PanelResult]]) -> dict[int, int]:
    """id of each text of the figure's axes -> the index of the panel whose cell holds
    the axes (a heatmap's colour bar is an axes of its own, in its panel's cell)."""
    from matplotlib.text import Text

    height = figure_height(results)
    owners: dict[int, int] = {}
    for axes in figure.axes:
        box = axes.get_position()
        x, y = (box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2
        holding = [
            index
            for index, (panel, _) in enumerate(results)
            if _inside(x, y, panel_box(panel["gridPos"], height))
        ]
        assert holding, f"an axes at {box} is in no panel's cell"
        texts = list(axes.findobj(Text))
        # a table's cells keep their texts to themselves: no child of the table's
        texts += [cell.get_text() for table in axes.tables for cell in table.get_celld().values()]
        owners.update((id(text), holding[0]) for text in texts)
    return owners


def _inside(x: float, y: float, box: tuple[float, float, float, float]) -> bool:
    left, bottom, width, height = box
    return left <= x <= left + width and bottom <= y <= bottom + height


def _cells(figure: Figure, results: list[tuple[dict[str, Any], PanelResult]]) -> dict[int, Bbox]:
    """Each panel's cell of the grid in pixels, and the title's band above the panels."""
    from matplotlib.transforms import Bbox

    height = figure_height(results)
    width_px, height_px = figure.bbox.width, figure.bbox.height
    cells = {}
    for index, (panel, _) in enumerate(results):
        left, bottom, width, cell = panel_box(panel["gridPos"], height)
        cells[index] = Bbox.from_bounds(
            left * width_px, bottom * height_px, width * width_px, cell * height_px
        )
    band = TITLE_INCHES / height * height_px
    cells[DASHBOARD] = Bbox.from_extents(0, height_px - band, width_px, height_px)
    return cells


def _extent(text: Text, renderer: Any) -> Bbox:
    """What the text covers on the picture: its extent, cut by its clip box if it has one."""
    from matplotlib.transforms import Bbox

    box = text.get_window_extent(renderer)
    clip = text.get_clip_box()
    if text.get_clip_on() and clip is not None:
        cut = Bbox.intersection(box, clip)
        return cut if cut is not None else Bbox.from_bounds(box.x0, box.y0, 0, 0)
    return box


def _overlap(a: Bbox, b: Bbox) -> bool:
    wide = min(a.x1, b.x1) - max(a.x0, b.x0)
    high = min(a.y1, b.y1) - max(a.y0, b.y0)
    return bool(wide > TOLERANCE_PX and high > TOLERANCE_PX)


def _outside(box: Bbox, cell: Bbox) -> str:
    """How far `box` stands out of `cell`, in pixels per side; "" when it does not."""
    sides = {
        "left": cell.x0 - box.x0,
        "right": box.x1 - cell.x1,
        "bottom": cell.y0 - box.y0,
        "top": box.y1 - cell.y1,
    }
    return ", ".join(f"{side} {px:.0f} px" for side, px in sides.items() if px > TOLERANCE_PX)


def text_problems(figure: Figure, results: list[tuple[dict[str, Any], PanelResult]]) -> list[str]:
    """Each overlap of two texts of a panel, and each text out of its panel, in words."""
    from matplotlib import rcParams
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    drawn: dict[int, Text] = {}
    figure.set_dpi(float(rcParams["savefig.dpi"]))  # the PNG's resolution: its text sizes
    canvas = FigureCanvasAgg(figure)
    with _watching_text(drawn):
        canvas.draw()
    renderer = canvas.get_renderer()
    owners = _owners(figure, results)
    cells = _cells(figure, results)
    names = {index: result.title for index, (_, result) in enumerate(results)}
    names[DASHBOARD] = "the dashboard's title"
    by_panel: dict[int, list[tuple[Text, Bbox]]] = {}
    problems = []
    for key, text in drawn.items():
        owner = owners.get(key, DASHBOARD)
        box = _extent(text, renderer)
        by_panel.setdefault(owner, []).append((text, box))
        out = _outside(box, cells[owner])
        if out:
            problems.append(f"{names[owner]}: {text.get_text()!r} leaves the panel ({out})")
    for owner, texts in by_panel.items():
        for (a, box_a), (b, box_b) in combinations(texts, 2):
            if _overlap(box_a, box_b):
                problems.append(f"{names[owner]}: {a.get_text()!r} overlaps {b.get_text()!r}")
    return problems
