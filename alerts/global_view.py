"""The recording rules of the global server past one Prometheus (deploy/scale).

The global server federates every rack server's recorded series of a node, GPU, port,
link or job owner, and records the roll-ups over many nodes again from them. Were it
to evaluate the whole recording file, a rule of a federated level whose inputs it also
holds (an owner's GPU share, read from the federated allocations; a BMC's report read,
from the federated BMC series) would be written twice into one series: by the rack's
evaluation, federated with its timestamp, and by its own. Prometheus drops the second
writer's samples where the timestamps meet ("different value but same timestamp") and
interleaves them where they do not. Its file is therefore the recording file without
the rules of the federated levels: each series has one writer.
"""

from __future__ import annotations

import re
from typing import Any

# the levels of the recorded series the global server federates from each rack (the
# prefix of a recorded name before its first colon), as its first `match[]` selector
# names them
FEDERATED_LEVELS = ("instance", "gpu", "port", "link", "owner", "owner_gpu")
_FEDERATED = re.compile("(" + "|".join(FEDERATED_LEVELS) + "):.+")


def federated_record(name: str) -> bool:
    """Whether the rule recording `name` is evaluated on the rack servers alone."""
    return _FEDERATED.fullmatch(name) is not None


def global_recording(recording: dict[str, Any]) -> dict[str, Any]:
    """`recording` (the generated recording file's groups) without the rules whose
    series the global server federates; a group left with no rule is left out."""
    groups = []
    for group in recording["groups"]:
        rules = [r for r in group["rules"] if not federated_record(r["record"])]
        if rules:
            groups.append({**group, "rules": rules})
    return {"groups": groups}
