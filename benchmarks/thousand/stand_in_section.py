"""The sentences of docs/scale.md's 1,000-node section on the stand-in for the rules'
series: what each engine's held, and what VictoriaMetrics' held and did not."""

from __future__ import annotations

from typing import Any


def recorded(engine: dict[str, Any]) -> str:
    r = engine.get("recorded_history")
    if not r:
        return ""
    return (
        f" The {r['series']:,} series its rules recorded, held over the history: "
        f"{r['samples'] / 1e6:.1f} M samples written in {r['write_seconds']:.0f} s, "
        f"answered {r['load_seconds']:.0f} s later."
    )


def vm_gap(figures: dict[str, Any]) -> str:
    """VictoriaMetrics' scrapers start after Prometheus' turn: what its data held from
    the history's end until then, and the recorded names its stand-in lacks."""
    v, generation = figures["engines"]["victoria-metrics"], figures["generation"]
    if "gap" in v:
        minutes = (v["live_from"] - generation["history_end"]) / 60
        gap = (
            f" Its own scrapers started {minutes:.0f} min after the history's end (after "
            "Prometheus' turn); those minutes were written as the replaying targets answered "
            f"them ({v['gap']['samples'] / 1e6:.1f} M samples, imported in "
            f"{v['gap']['seconds']:.0f} s), so its queries read the data Prometheus' did."
        )
    else:
        gap = (
            " Its own scrapers started after Prometheus' turn, and this run left the minutes "
            "from the history's end until then empty in it (as long as Prometheus' turn): "
            "its 1 h queries read less than Prometheus' did, and rules looking back over "
            "those minutes (the straggler rules look 15 minutes back) recorded nothing at "
            "first."
        )
    return gap + _chains(v) + _missing_names(figures)


def _missing_names(figures: dict[str, Any]) -> str:
    """The recorded names Prometheus' stand-in holds and VictoriaMetrics' does not."""
    held = {e: f.get("recorded_history", {}).get("names") for e, f in figures["engines"].items()}
    if not held.get("prometheus") or not held.get("victoria-metrics"):
        return ""
    missing = sorted(set(held["prometheus"]) - set(held["victoria-metrics"]))
    if not missing:
        return ""
    series = sum(held["prometheus"][name] for name in missing)
    return (
        f" Its stand-in for the rules' series holds none of the {series:,} series of "
        f"{len(missing)} recorded names that Prometheus' holds "
        f"({', '.join(f'`{n}`' for n in missing[:3])} among them): the panels reading "
        "them read its live minutes only, a lower bound."
    )


def _chains(v: dict[str, Any]) -> str:
    """How long the stand-in waited for vmalert's chained rules, where a run did."""
    if "chained_seconds" not in v:
        return ""
    return (
        " vmalert's rules read another rule's series an evaluation after it was recorded, "
        f"and its rules chain up to {max(v['chains'].values())} deep (the straggler "
        "rules): its stand-in was taken once each group had been evaluated as often as "
        f"its rules chain, {v['chained_seconds']:.0f} s after the rules' last reading."
    )
