"""How many evaluations a recorded series waits for the series it is computed from.

A recording rule may read another rule's series, which may read another's: the
straggler rules read each rank's value, then its job's median, then a score off both.
Prometheus evaluates a group's rules in order, each reading the ones before it in the
same evaluation, and another group's as of that group's last evaluation. vmalert sends
every result back to the store over remote write, so a rule reads any other rule's
series an evaluation after it was recorded, in its own group as in another. The depth
of a group is the number of evaluations until its deepest series holds what the data
held at the first: under vmalert one per rule in the longest chain, under Prometheus
one per group the chain passes through.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

# a name as an expression reads it (a recorded one has colons)
NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")

Groups = Sequence[Mapping[str, Any]]  # as a rule file holds them: name, rules


def chain_depths(groups: Groups, each_rule_waits: bool = True) -> dict[str, int]:
    """Each group's depth: 1 where its recording rules read only what agents export, 0
    for a group of alerts only. `each_rule_waits`: vmalert's way (every recorded series
    read an evaluation later); otherwise Prometheus' (an earlier rule of the same group
    read at once)."""
    made_by: dict[str, tuple[str, int]] = {}  # name -> its group, its rule's place
    reads: dict[str, set[str]] = {}
    for group in groups:
        for place, rule in enumerate(group["rules"]):
            if "record" in rule:
                made_by.setdefault(rule["record"], (group["name"], place))
                reads.setdefault(rule["record"], set()).update(NAME.findall(rule["expr"]))
    depths: dict[str, int] = {}

    def waits(name: str, source: str) -> int:
        """1 where `name` reads `source` an evaluation after it was recorded."""
        (group, place), (from_group, from_place) = made_by[name], made_by[source]
        return int(each_rule_waits or group != from_group or from_place > place)

    def depth(name: str) -> int:
        if name not in depths:
            depths[name] = 1  # a rule reading its own last value (or a cycle) adds nothing
            sources = [n for n in reads[name] if n in reads and n != name]
            depths[name] = max([1, *(depth(s) + waits(name, s) for s in sources)])
        return depths[name]

    return {
        group["name"]: max([0, *(depth(r["record"]) for r in group["rules"] if "record" in r)])
        for group in groups
    }
