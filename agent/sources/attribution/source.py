"""The poller source `attribution`: the refresher's cache as a sample, never a resolver call.

Health follows the cache: a resolver that failed its last refresh (kubelet socket gone,
/proc entry unreadable) makes the source down with that error, while the owners the
other resolvers found are still served (`SourceDegraded`). A cache older than
`stale_after` (the thread stuck in a call that ignored its timeout) is served as no
owners at all, also with an error: old owners would credit a finished job with the GPU.
"""

from __future__ import annotations

from nvwatch.agent.sources import SourceDegraded
from nvwatch.agent.sources.attribution.model import AttributionSample
from nvwatch.agent.sources.attribution.refresher import AttributionRefresher


class AttributionSource:
    name = "attribution"

    def __init__(self, refresher: AttributionRefresher, *, stale_after: float) -> None:
        self.refresher = refresher
        self._stale_after = stale_after

    def collect(self) -> AttributionSample:
        refresher = self.refresher
        refresher.start()  # on the first poll, in the poller's context; then a no-op
        cache = refresher.cached()
        now = refresher.clock()
        since = cache.refreshed_at if cache.refreshed_at is not None else refresher.started_at
        if since is not None and now - since > self._stale_after:
            raise SourceDegraded(
                AttributionSample(()),
                f"no attribution refresh for {now - since:.1f}s (limit {self._stale_after:g}s)",
            )
        sample = AttributionSample(cache.allocations)
        if cache.errors:
            raise SourceDegraded(sample, "; ".join(cache.errors))
        return sample

    def close(self) -> None:
        self.refresher.stop(timeout=0.5)
