"""The one error `nvwatch report` stops on; its message is the line the user reads."""

from __future__ import annotations


class ReportError(Exception):
    """The report cannot be made: Prometheus unreachable or refusing, no data in the range."""


class TooManySamples(ReportError):
    """The server refused a query for the samples it would hold at once (Prometheus'
    --query.max-samples, VictoriaMetrics' -search.maxSamplesPerQuery); the same query
    over part of the range holds fewer."""


class QueryTimedOut(ReportError):
    """The server did not answer one query within --timeout (a month of a large fleet on
    a busy server); the same query over half its range asks half the work of it."""
