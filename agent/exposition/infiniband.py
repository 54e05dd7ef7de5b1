"""InfinibandSample -> nvwatch_ib_* families, by looping over the catalogue.

Absent values stay absent: a counter the port did not answer has no series this poll
rather than a 0 that would make rate() see a reset. Byte counters are the sysfs 4-octet
word counts x 4. Values are ints up to 2^64 in the sample; the exposition is float64
like all Prometheus samples, exact up to 2^53.
"""

from __future__ import annotations

from nvwatch.agent.catalogue import Scope, of_scope
from nvwatch.agent.exposition.families import FamilySet
from nvwatch.agent.exposition.series import compiled_families, emit_all
from nvwatch.agent.sources.infiniband import InfinibandSample

_DEVICE_PLANS = compiled_families(of_scope(Scope.IB_DEVICE))
_PORT_PLANS = compiled_families(of_scope(Scope.IB_PORT))


def render(sample: InfinibandSample, out: FamilySet) -> None:
    # device identity is in the info family's own labels: no identity labels of its own
    emit_all(_DEVICE_PLANS, [((), device) for device in sample.devices], out)
    ports = [((p.device, p.port), p) for d in sample.devices for p in d.ports]
    emit_all(_PORT_PLANS, ports, out)
