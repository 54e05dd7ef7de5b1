"""Every number a report table prints is formatted for people: no column prints a float
as Python writes it (a fair-share factor once showed as 0.08011440161109062)."""

from __future__ import annotations

import re

from nvwatch.report.html import _table
from nvwatch.report.sections.demand_accounts import AccountUse, account_table
from tests.report.conftest import SyntheticReport

# a number written with more digits after the point than any formatter writes
_RAW_FLOAT = re.compile(r"\d\.\d{5,}")


def _account(factor: float | None) -> AccountUse:
    return AccountUse(
        name="physics",
        gpu_hours=1234.5678,
        gpu_hours_share=0.123456789,
        shares_norm=0.0833333333333,
        usage_effective=0.0712345678,
        factor=factor,
        waiting_gpus=3.333333333,
        waits=None,
    )


def test_the_fair_share_factor_prints_three_decimals() -> None:
    html = _table(account_table([_account(0.08011440161109062)]))
    cells = re.findall(r'<td class="num">([^<]*)</td>', html)
    assert "0.080" in cells, cells
    assert not _RAW_FLOAT.search(html), html


def test_no_table_of_the_sample_report_prints_a_raw_float(
    synthetic_report: SyntheticReport,
) -> None:
    """Over every table of a whole report: a column that holds numbers has a unit, so the
    HTML formats it; and the HTML holds no float as Python writes it."""
    for key, section in synthetic_report.data["sections"].items():
        for name, table in section["tables"].items():
            for column in table["columns"]:
                values = [row[column["key"]] for row in table["rows"]]
                numbers = [v for v in values if isinstance(v, float)]
                assert column["unit"] or not numbers, (key, name, column["key"], numbers[:3])
    html = (synthetic_report.out / "report.html").read_text(encoding="utf-8")
    text_only = re.sub(r"<(img|script|style)[^>]*>.*?(</\1>)?", "", html, flags=re.S)
    assert not _RAW_FLOAT.search(text_only), _RAW_FLOAT.findall(text_only)[:5]
