"""A small client for the Prometheus HTTP API (`/api/v1/query_range`), stdlib only.

Anything that speaks the API answers: Prometheus, VictoriaMetrics, Thanos, Mimir. Every
failure becomes one `ReportError` line that says what to check: the address, the
credentials, or the query the server rejected. Where the server is and how to reach it
(URL, credentials, TLS) is common/http_connection.py's `Connection`.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from nvwatch.common.http_connection import (
    Connection,
    ConnectionSetupError,
    auth_headers,
    ssl_context,
)
from nvwatch.report.errors import QueryTimedOut, ReportError, TooManySamples

# how each server says a query would hold more samples than it allows: Prometheus'
# --query.max-samples, VictoriaMetrics' -search.maxSamplesPerQuery and, for a subquery
# of a long range, -search.maxPointsPerTimeseries (30,000: three weeks at a minute)
_TOO_MANY_SAMPLES = ("too many samples", "maxSamplesPerQuery", "maxPointsPerTimeseries")


@dataclass(frozen=True)
class RangeResult:
    """One range query's series: labels and [unix seconds, value] pairs as Prometheus
    sends them (the value a string: "0.5", "NaN", "+Inf"); Frame turns them into floats
    with numpy, a query's 720,000 points at once rather than one Python float each."""

    series: list[tuple[dict[str, str], list[list[Any]]]]


class PrometheusClient:
    def __init__(self, connection: Connection) -> None:
        self._connection = connection
        self._base = connection.url.rstrip("/")
        try:
            self._ssl = ssl_context(connection)
        except ConnectionSetupError as err:  # a CA file that cannot be loaded
            raise ReportError(str(err)) from None
        self._headers = {
            "Accept": "application/json",
            **connection.headers,
            **auth_headers(connection),
        }

    def query_range(self, expr: str, start: float, end: float, step: float) -> RangeResult:
        data = self._post(
            "/api/v1/query_range",
            {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"},
            expr,
        )
        if data.get("resultType") != "matrix":
            raise ReportError(f"Prometheus answered {data.get('resultType')!r}, not a matrix")
        return RangeResult([(dict(s["metric"]), s["values"]) for s in data["result"]])

    def query(self, expr: str, at: float) -> list[tuple[dict[str, str], Any]]:
        """An instant query: each series' labels and its value, a [time, "value"] pair for
        a vector, the list of such pairs for a range selector (a matrix)."""
        data = self._post("/api/v1/query", {"query": expr, "time": f"{at:.3f}"}, expr)
        if data.get("resultType") == "matrix":
            return [(dict(s["metric"]), s["values"]) for s in data["result"]]
        if data.get("resultType") != "vector":
            raise ReportError(f"Prometheus answered {data.get('resultType')!r}, not a vector")
        return [(dict(s["metric"]), s["value"]) for s in data["result"]]

    def _post(self, path: str, form: dict[str, str], expr: str) -> dict[str, Any]:
        # POST: a 30-day query with a long selector can outgrow a GET URL's limit
        request = urllib.request.Request(
            self._base + path,
            data=urllib.parse.urlencode(form).encode(),
            headers={**self._headers, "Content-Type": "application/x-www-form-urlencoded"},
            method="POST",
        )
        try:
            with urllib.request.urlopen(
                request, timeout=self._connection.timeout_seconds, context=self._ssl
            ) as response:
                body = response.read()
        except urllib.error.HTTPError as err:
            raise _http_error(err, expr, self._base) from None
        except OSError as err:  # URLError, refused connections and timeouts are all OSError
            reason = getattr(err, "reason", err)
            if isinstance(reason, TimeoutError):
                raise QueryTimedOut(
                    f"Prometheus at {self._base} did not answer within "
                    f"{self._connection.timeout_seconds:g} s (--timeout): {_short(expr)}"
                ) from None
            raise ReportError(f"cannot reach Prometheus at {self._base}: {reason}") from None
        return _payload(body, expr)


def _payload(body: bytes, expr: str) -> dict[str, Any]:
    try:
        answer = json.loads(body)
    except ValueError:
        raise ReportError("Prometheus answered something that is not JSON") from None
    if answer.get("status") != "success":
        raise rejection(expr, str(answer.get("error", answer)))
    data: dict[str, Any] = answer["data"]
    return data


def _http_error(err: urllib.error.HTTPError, expr: str, base: str) -> ReportError:
    if err.code in (401, 403):
        return ReportError(
            f"Prometheus at {base} refused access (HTTP {err.code}): "
            "check --basic-auth-user/--basic-auth-password-file or --bearer-token-file"
        )
    try:
        message = json.loads(err.read()).get("error") or err.reason
    except (ValueError, OSError):
        message = err.reason
    if err.code in (400, 422):
        return rejection(expr, str(message))
    return ReportError(f"Prometheus at {base} failed (HTTP {err.code}): {message}")


def rejection(expr: str, message: str) -> ReportError:
    """The error for a query the server refused: TooManySamples where its words say the
    range was too large for it (the caller splits the range), else a ReportError."""
    kind = TooManySamples if any(m in message for m in _TOO_MANY_SAMPLES) else ReportError
    return kind(f"Prometheus rejected {_short(expr)}: {message}")


def _short(expr: str) -> str:
    """The query on one line, cut to a length that keeps the error message one line."""
    flat = " ".join(expr.split())
    return flat if len(flat) <= 120 else flat[:117] + "..."
