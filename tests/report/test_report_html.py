"""report.html is one self-contained, printable file: checked by parsing it and in Chromium."""

from __future__ import annotations

import base64
import csv
import io
import re
from html import escape
from html.parser import HTMLParser
from pathlib import Path

import pytest
from PIL import Image

from nvwatch.report import style, units
from tests.conftest import require_tool
from tests.report.chromium import measure, render
from tests.report.conftest import SyntheticReport

pytestmark = pytest.mark.timeout(600)
SAMPLE = Path(__file__).resolve().parents[2] / "docs" / "report-sample" / "report.html"


class _References(HTMLParser):
    """Every src/href in a page, and the data: URIs of its images."""

    def __init__(self) -> None:
        super().__init__()
        self.references: list[str] = []
        self.images: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name in ("src", "href", "srcset", "poster", "data") and value is not None:
                self.references.append(value)
                if tag == "img" and name == "src":
                    self.images.append(value)


def _parse(path: Path) -> _References:
    parser = _References()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def _decode_png(uri: str) -> Image.Image:
    header, payload = uri.split(",", 1)
    assert header == "data:image/png;base64"
    image = Image.open(io.BytesIO(base64.b64decode(payload)))
    image.load()
    return image


def _drawn(image: Image.Image) -> bool:
    """More than one colour: something was drawn on the white background."""
    colours = image.convert("RGB").getcolors(maxcolors=1 << 20)
    return colours is None or len(colours) > 1


def test_the_html_references_nothing_outside_itself(synthetic_report: SyntheticReport) -> None:
    page = synthetic_report.out / "report.html"
    html = page.read_text(encoding="utf-8")
    refs = _parse(page)
    assert refs.references, "no images at all"
    assert all(r.startswith("data:") for r in refs.references), [r[:60] for r in refs.references]
    # no stylesheet, script or font from elsewhere either
    assert not re.search(r"<script|<link|@import|url\(", html)


def test_every_plot_decodes_and_shows_something(synthetic_report: SyntheticReport) -> None:
    images = _parse(synthetic_report.out / "report.html").images
    plots = [p for s in synthetic_report.data["sections"].values() for p in s["plots"]]
    assert len(images) == len(plots) >= 6
    for uri, plot in zip(images, plots, strict=True):
        image = _decode_png(uri)
        assert image.width > 300 and image.height > 150, plot["name"]
        assert _drawn(image), plot["name"]
        assert len(base64.b64decode(uri.split(",", 1)[1])) == plot["png_bytes"]


def test_every_headline_number_is_in_the_html_and_every_table_in_a_csv(
    synthetic_report: SyntheticReport,
) -> None:
    html = (synthetic_report.out / "report.html").read_text(encoding="utf-8")
    for key, section in synthetic_report.data["sections"].items():
        for number in section["numbers"].values():
            assert units.fmt(number["value"], number["unit"]) in html, (key, number)
        for name, table in section["tables"].items():
            with (synthetic_report.out / f"{key}_{name}.csv").open(encoding="utf-8") as handle:
                rows = list(csv.DictReader(handle))
            assert len(rows) == len(table["rows"])
            for row, expected in zip(rows, table["rows"], strict=True):
                assert set(row) == set(expected)
    for sentence in synthetic_report.data["summary"]:
        assert escape(sentence) in html


def test_chromium_renders_it_to_png_and_pdf_with_no_requests_or_errors(
    synthetic_report: SyntheticReport, tmp_path: Path
) -> None:
    chromium = require_tool("chromium", "chromium-browser")
    page = synthetic_report.out / "report.html"
    screenshot = render(chromium, page, tmp_path / "page.png", tmp_path / "png", pdf=False)
    printed = render(chromium, page, tmp_path / "report.pdf", tmp_path / "pdf", pdf=True)
    for rendering in (screenshot, printed):
        assert rendering.page_requests == []
        assert rendering.console == []
    image = Image.open(screenshot.output)
    assert image.size == (1200, 1600)
    assert _drawn(image)
    pdf = printed.output.read_bytes()
    assert pdf.startswith(b"%PDF-")
    # each section starts a page when printed: at least one page per section
    pages = len(re.findall(rb"/Type\s*/Page[^s]", pdf))
    assert pages >= len(synthetic_report.data["sections"])


def test_the_chromium_check_does_catch_a_request_and_a_console_error(tmp_path: Path) -> None:
    """The same check on a page that breaks both rules (loopback port 9: nothing there)."""
    chromium = require_tool("chromium", "chromium-browser")
    page = tmp_path / "bad.html"
    page.write_text(
        '<html><body><img src="http://127.0.0.1:9/x.png">'
        '<script>console.error("broken")</script></body></html>'
    )
    rendering = render(chromium, page, tmp_path / "bad.png", tmp_path / "work", pdf=False)
    assert rendering.page_requests == ["http://127.0.0.1:9/x.png"]
    assert any('"broken"' in line for line in rendering.console)


def _assert_numbers_on_one_line(measured: dict[str, object], where: str) -> None:
    cells = measured["cells"]
    tables = measured["tables"]
    assert isinstance(cells, list) and isinstance(tables, list)
    values = [c for c in cells if not c["head"]]
    assert len(values) > 50, where  # the report's tables are there
    wrapped = [c for c in values if c["lines"] != 1 or c["whiteSpace"] != "nowrap"]
    assert wrapped == [], f"{where}: numbers over two lines: {wrapped[:5]}"
    # a table wider than its box scrolls in it; the page itself never scrolls sideways
    for table in tables:
        assert table["width"] <= table["room"] + 1 or table["scrolls"], (where, table)
    assert measured["pageOverflows"] is False, where


@pytest.mark.parametrize("width", [1200, 800])
def test_chromium_lays_every_number_on_one_line(
    synthetic_report: SyntheticReport, tmp_path: Path, width: int
) -> None:
    """In the page as Chromium lays it out, wide (a desktop) and narrow (a laptop's
    half screen): every numeric cell one line, every table in its box."""
    chromium = require_tool("chromium", "chromium-browser")
    for name, page in (("synthetic", synthetic_report.out / "report.html"), ("sample", SAMPLE)):
        measured = measure(chromium, page, tmp_path / name, width=width)
        _assert_numbers_on_one_line(measured, f"{name} at {width}px")


def test_the_measure_does_catch_a_wrapped_number(tmp_path: Path) -> None:
    """The same measure on a page whose numbers may wrap in a narrow column."""
    chromium = require_tool("chromium", "chromium-browser")
    page = tmp_path / "wraps.html"
    cells = "".join('<td class="num">1.84 kW</td>' for _ in range(60))
    page.write_text(
        f'<html><body><h3>t</h3><table style="width:300px"><tr>{cells}</tr></table></body></html>'
    )
    measured = measure(chromium, page, tmp_path / "work", width=800)
    assert all(c["lines"] == 2 for c in measured["cells"])
    with pytest.raises(AssertionError, match="numbers over two lines"):
        _assert_numbers_on_one_line(measured, "wraps")


def _rgb(colour: str) -> tuple[int, int, int]:
    return (int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16))


def _pixels_near(image: Image.Image, colour: str, within: float = 24.0) -> int:
    """How many pixels of the image are drawn in (about) `colour`."""
    target = _rgb(colour)
    counts = image.convert("RGB").getcolors(maxcolors=1 << 24) or []
    return sum(
        n
        for n, rgb in counts
        if sum((a - b) ** 2 for a, b in zip(rgb, target, strict=True)) <= within**2
    )


def _chart(html: str, title: str) -> Image.Image:
    (uri,) = [u for u, alt in re.findall(r'<img src="([^"]+)" alt="([^"]*)"', html) if alt == title]
    return _decode_png(uri)


def test_every_rack_has_its_own_colour_and_it_is_drawn(synthetic_report: SyntheticReport) -> None:
    (plot,) = [p for p in synthetic_report.section("power")["plots"] if p["name"] == "rack_power"]
    legend = {entry["label"]: entry["colour"].upper() for entry in plot["legend"]}
    assert set(legend) == {row["rack"] for row in synthetic_report.table("power", "by_rack")}
    assert len(set(legend.values())) == len(legend)
    assert set(legend.values()) <= set(style.RACK_COLOURS)
    image = _chart((synthetic_report.out / "report.html").read_text(), plot["title"])
    for rack, colour in legend.items():
        assert _pixels_near(image, colour) > 100, rack  # its line, not just the legend's


def test_the_sample_draws_each_rack_in_its_own_colour() -> None:
    """docs/report-sample: a rack mixes node classes there; each still has a colour."""
    html = SAMPLE.read_text(encoding="utf-8")
    table = html.split("<h3>GPU power per rack against its plan</h3>", 1)[1].split("</table>")[0]
    racks = table.count("<tr>") - 1  # the header row
    assert racks >= 3
    image = _chart(html, "Highest hourly GPU power per rack, by day")
    for colour in style.RACK_COLOURS[:racks]:
        assert _pixels_near(image, colour) > 100, colour
