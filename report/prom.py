"""A small client for the Prometheus HTTP API (`/api/v1/query_range`), stdlib only.

Anything that speaks the API answers: Prometheus, VictoriaMetrics, Thanos, Mimir. Every
failure becomes one `ReportError` line that says what to check: the address, the
credentials, or the query the server rejected.
"""

from __future__ import annotations

import base64
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nvwatch.common.regular_files import regular_size
from nvwatch.report.errors import ReportError


@dataclass(frozen=True)
class Connection:
    """Where Prometheus is and how to authenticate to it."""

    url: str
    basic_auth: tuple[str, str] | None = None  # (user, password)
    bearer_token: str | None = None
    ca_file: Path | None = None
    insecure_tls: bool = False
    timeout_seconds: float = 120.0
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_url(self.url, "--prometheus")
        if self.basic_auth and self.bearer_token:
            raise ReportError("give basic auth or a bearer token, not both")


def check_url(url: str, what: str) -> None:
    """ReportError naming `what` (the flag) unless `url` is http(s)://host[:port][/path]."""
    parsed = urllib.parse.urlsplit(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ReportError(f"{what} {url!r}: expected http(s)://host:port[/path]")


def auth_headers(connection: Connection) -> dict[str, str]:
    """The Authorization header the connection's credentials make, if any."""
    if connection.basic_auth is not None:
        user, password = connection.basic_auth
        token = base64.b64encode(f"{user}:{password}".encode()).decode("ascii")
        return {"Authorization": f"Basic {token}"}
    if connection.bearer_token:
        return {"Authorization": f"Bearer {connection.bearer_token}"}
    return {}


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
        self._ssl = ssl_context(connection)
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
            raise ReportError(f"cannot reach Prometheus at {self._base}: {reason}") from None
        return _payload(body, expr)


def ssl_context(connection: Connection) -> ssl.SSLContext | None:
    """None for http; for https, a context that verifies the server against --ca-file
    (the system's CAs without one), or nothing at all when insecure_tls is asked for."""
    if not connection.url.startswith("https"):
        return None
    if connection.insecure_tls:
        # the operator asked for it (a lab server with a self-signed certificate)
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    cafile = str(connection.ca_file) if connection.ca_file else None
    try:
        if connection.ca_file is not None:
            regular_size(connection.ca_file)  # OpenSSL would wait on a FIFO for good
        return ssl.create_default_context(cafile=cafile)
    except (OSError, ssl.SSLError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else err
        raise ReportError(f"--ca-file {connection.ca_file}: {why}") from None


def _payload(body: bytes, expr: str) -> dict[str, Any]:
    try:
        answer = json.loads(body)
    except ValueError:
        raise ReportError("Prometheus answered something that is not JSON") from None
    if answer.get("status") != "success":
        raise ReportError(f"Prometheus rejected {_short(expr)}: {answer.get('error', answer)}")
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
        return ReportError(f"Prometheus rejected {_short(expr)}: {message}")
    return ReportError(f"Prometheus at {base} failed (HTTP {err.code}): {message}")


def _short(expr: str) -> str:
    """The query on one line, cut to a length that keeps the error message one line."""
    flat = " ".join(expr.split())
    return flat if len(flat) <= 120 else flat[:117] + "..."
