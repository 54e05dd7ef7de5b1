"""The preview's tables show what Grafana shows: a value mapping's words in place of the
code, the `organize` transformation's hidden columns left out and its renames used."""

from __future__ import annotations

from typing import Any

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt

from nvwatch.dashboards.preview_panels import Series, draw_table

# A panel as Grafana's JSON model writes one, by hand: verdict codes 0..2 with words.
PANEL: dict[str, Any] = {
    "type": "table",
    "title": "Verdict per job",
    "fieldConfig": {
        "defaults": {
            "unit": "none",
            "mappings": [
                {
                    "type": "value",
                    "options": {
                        "0": {"text": "busy", "color": "green"},
                        "2": {"text": "thermally throttled", "color": "red"},
                    },
                }
            ],
        }
    },
    "transformations": [
        {
            "id": "organize",
            "options": {
                "excludeByName": {"Time": True, "account": True},
                "renameByName": {"Value": "verdict", "job_id": "job"},
            },
        }
    ],
}


def _cells(panel: dict[str, Any], series: list[Series]) -> list[list[str]]:
    figure, axes = plt.subplots(figsize=(8, 3))
    try:
        draw_table(axes, panel, series, "none")
        (table,) = axes.tables
        cells = table.get_celld()
        rows = 1 + max(r for r, _ in cells)
        columns = 1 + max(c for _, c in cells)
        return [[cells[r, c].get_text().get_text() for c in range(columns)] for r in range(rows)]
    finally:
        plt.close(figure)


def _series(job: str, account: str, value: float) -> Series:
    labels = {"job_id": job, "account": account, "instance": f"n{job}"}
    return Series(job, labels, [(0.0, value)])


def test_codes_show_as_their_words_and_the_organize_options_apply() -> None:
    rows = _cells(PANEL, [_series("11", "ml", 2), _series("12", "cv", 0), _series("13", "ml", 5)])
    assert rows[0] == ["instance", "job", "verdict"]  # account hidden, two renamed
    assert rows[1] == ["n11", "11", "thermally throttled"]
    assert rows[2] == ["n12", "12", "busy"]
    assert rows[3] == ["n13", "13", "5"]  # no mapping for 5: the number, as Grafana shows


def test_without_mappings_or_transformations_the_table_is_unchanged() -> None:
    plain = {"type": "table", "title": "t", "fieldConfig": {"defaults": {"unit": "none"}}}
    rows = _cells(plain, [_series("11", "ml", 2), _series("12", "cv", 0)])
    assert rows[0] == ["account", "instance", "job_id", "Value"]
    assert rows[1] == ["ml", "n11", "11", "2"]
