"""Content negotiation for /metrics: which format and whether to gzip, by RFC 9110 q-values."""

from __future__ import annotations

import math

# prometheus_client's choose_encoder() and gzip_accepted() match names and ignore q-values
# (they serve gzip for "gzip;q=0" and OpenMetrics for "application/openmetrics-text;q=0"),
# so the agent weighs RFC 9110 q-values itself. One version of each format is served, so a
# media range's version parameter does not change which format is chosen.

_TEXT = "text/plain"
_OPENMETRICS = "application/openmetrics-text"


def _weighted(header: str) -> list[tuple[str, float]]:
    """'a;v=1;q=0.5, B' -> [('a', 0.5), ('b', 1.0)]: lower-cased names and their q-values."""
    items = []
    for element in header.split(","):
        name, *params = (part.strip() for part in element.split(";"))
        if name:
            items.append((name.lower(), _qvalue(params)))
    return items


def _qvalue(params: list[str]) -> float:
    for param in params:
        key, _, value = param.partition("=")
        if key.strip().lower() == "q":
            try:
                q = float(value.strip())
            except ValueError:
                return 0.0  # an unreadable weight accepts nothing rather than everything
            return min(1.0, max(0.0, q)) if math.isfinite(q) else 0.0
    return 1.0


def _media_preference(offer: str, ranges: list[tuple[str, float]]) -> tuple[float, int, int]:
    """(q, specificity, -position) of the most specific range matching `offer`."""
    best = (0.0, -1, 0)
    for position, (media_range, q) in enumerate(ranges):
        if media_range == offer:
            specificity = 2
        elif media_range == offer.split("/")[0] + "/*":
            specificity = 1
        elif media_range == "*/*":
            specificity = 0
        else:
            continue
        # the most specific range decides; of equally specific ones (two OpenMetrics
        # versions, say) the highest weight counts
        if specificity > best[1] or (specificity == best[1] and q > best[0]):
            best = (q, specificity, -position)
    return best


def wants_openmetrics(accept: str | None) -> bool:
    """Whether an Accept header prefers OpenMetrics over the Prometheus text format.

    The higher q wins; on equal q the more specific match (a named type beats `*/*`), then
    the one the client listed first. Text on a full tie (`*/*`, as curl sends), when
    neither is acceptable, and without a header, as Prometheus' own exporters do.
    """
    if not accept or not accept.strip():
        return False
    ranges = _weighted(accept)
    openmetrics = _media_preference(_OPENMETRICS, ranges)
    return openmetrics[0] > 0 and openmetrics > _media_preference(_TEXT, ranges)


def gzip_accepted(accept_encoding: str | None) -> bool:
    """Whether to gzip a response, by an Accept-Encoding header's q-values.

    gzip's weight is its own entry's (or `x-gzip`'s, its registered alias), else that of
    `*`; the response is gzipped when that weight is above zero and not below identity's
    (its own entry's, else `*`'s; a header that names neither leaves identity out).
    """
    codings: dict[str, float] = {}
    for name, q in _weighted(accept_encoding or ""):
        codings.setdefault("gzip" if name == "x-gzip" else name, q)
    gzip_q = codings.get("gzip", codings.get("*", 0.0))
    identity_q = codings.get("identity", codings.get("*"))
    return gzip_q > 0 and (identity_q is None or gzip_q >= identity_q)
