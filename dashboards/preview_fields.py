"""What Grafana does to a panel's fields before drawing them, for the preview's tables:
value mappings (a verdict code shown as its words) and the `organize` transformation
(columns hidden or renamed). Without them a preview shows "Value 2" where Grafana shows
"thermally throttled"."""

from __future__ import annotations

from typing import Any


def mapped_text(panel: dict[str, Any], value: float) -> str | None:
    """The text a value mapping of the panel gives `value`, None where none applies."""
    if value != value or value != int(value):  # NaN, or not a code a value mapping names
        return None
    mappings = panel.get("fieldConfig", {}).get("defaults", {}).get("mappings", [])
    for mapping in mappings:
        if mapping.get("type") != "value":
            continue
        option = mapping.get("options", {}).get(str(int(value)))
        if option is not None and option.get("text"):
            return str(option["text"])
    return None


def _organize(panel: dict[str, Any]) -> dict[str, Any]:
    for transformation in panel.get("transformations", []):
        if transformation.get("id") == "organize":
            options = transformation.get("options", {})
            return options if isinstance(options, dict) else {}
    return {}


def shown_columns(panel: dict[str, Any], columns: list[str]) -> list[str]:
    """The label columns the panel's `organize` transformation does not hide."""
    hidden = _organize(panel).get("excludeByName", {})
    return [c for c in columns if not hidden.get(c)]


def column_title(panel: dict[str, Any], column: str) -> str:
    """A column's header after the panel's `organize` renames."""
    return str(_organize(panel).get("renameByName", {}).get(column) or column)
