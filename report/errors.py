"""The one error `nvwatch report` stops on; its message is the line the user reads."""

from __future__ import annotations


class ReportError(Exception):
    """The report cannot be made: Prometheus unreachable or refusing, no data in the range."""
