"""`nvwatch report` failing clearly: one line on stderr and exit 2, never a traceback."""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import bcrypt
import pytest

from nvwatch.common.http_connection import Connection
from nvwatch.report.prom import PrometheusClient
from nvwatch.sim.ports import free_port
from tests.agent.server_helpers import Certs, make_certs
from tests.prometheus_on_blocks import prometheus_on
from tests.report import synthetic
from tests.report.conftest import Backfill, SyntheticReport, report_args

# the first test also waits for the session backfill
pytestmark = pytest.mark.timeout(600)

USER, PASSWORD = "reviewer", "correct horse battery"


def nvwatch(*args: str, setup: str = "") -> subprocess.CompletedProcess[str]:
    """Run the real CLI in a fresh interpreter (`setup` runs first, e.g. to hide a module)."""
    code = f"{setup}\nfrom nvwatch.agent.cli import main\nmain({list(args)!r})"
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if not line.startswith("querying")]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("nvwatch: error: ")
    assert "Traceback" not in result.stderr
    return lines[0]


@contextlib.contextmanager
def _strict_copy(
    backfill: Backfill, work: Path, web_config: str, tls: bool = False
) -> Iterator[str]:
    """The history in a second Prometheus behind `web_config`, with a sample limit every
    report query exceeds: a report that gets through the door is then refused a query."""
    tsdb = work / "tsdb"
    shutil.copytree(
        backfill.tsdb, tsdb, ignore=shutil.ignore_patterns("lock", "wal", "chunks_head")
    )
    web = work / "web.yml"
    web.write_text(web_config)
    with prometheus_on(
        tsdb, work, f"--web.config.file={web}", "--query.max-samples=100", tls=tls
    ) as url:
        yield url


@pytest.fixture(scope="module")
def guarded_prometheus(
    backfill: Backfill, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """Behind basic auth."""
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(rounds=4)).decode()
    config = f"basic_auth_users:\n  {USER}: '{hashed}'\n"
    with _strict_copy(backfill, tmp_path_factory.mktemp("guarded"), config) as url:
        yield url


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Certs:
    return make_certs(tmp_path_factory.mktemp("certs"))


@pytest.fixture(scope="module")
def tls_prometheus(
    backfill: Backfill, certs: Certs, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """Over https, with a certificate for 127.0.0.1 from a CA of the test's own."""
    config = (
        f"tls_server_config:\n  cert_file: {certs.server_cert}\n  key_file: {certs.server_key}\n"
    )
    with _strict_copy(backfill, tmp_path_factory.mktemp("tls"), config, tls=True) as url:
        yield url


def test_the_report_shows_progress_on_stderr(synthetic_report: SyntheticReport) -> None:
    assert "querying Prometheus" in synthetic_report.stderr
    assert "wrote" in synthetic_report.stderr


def test_a_prometheus_that_does_not_answer_in_time(tmp_path: Path) -> None:
    """A server that takes the connection and never answers (a query too slow for the
    fleet) is a line naming --timeout, not "cannot reach"."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)  # the kernel completes the handshakes; nothing reads
        url = f"http://127.0.0.1:{silent.getsockname()[1]}"
        line = one_line_error(nvwatch(*report_args(url, tmp_path, "--timeout", "1")))
    assert f"Prometheus at {url} did not answer within 1 s (--timeout)" in line


def test_an_unreachable_prometheus(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port('127.0.0.1')}"  # nothing listens there
    line = one_line_error(nvwatch(*report_args(url, tmp_path)))
    assert f"cannot reach Prometheus at {url}" in line


def test_a_range_without_nvwatch_data(synthetic_report: SyntheticReport, tmp_path: Path) -> None:
    args = report_args(synthetic_report.url, tmp_path)
    args[args.index("--end") + 1] = "2020-01-01T00:00:00Z"
    line = one_line_error(nvwatch(*args))
    assert "no nvwatch data between 2019-12-11 00:00 UTC and 2020-01-01 00:00 UTC" in line


def test_a_cluster_without_data(synthetic_report: SyntheticReport, tmp_path: Path) -> None:
    line = one_line_error(
        nvwatch(*report_args(synthetic_report.url, tmp_path, "--cluster", 'no"such'))
    )
    assert "cluster 'no\"such'" in line  # quoted into PromQL safely: no data, not a parse error


def test_a_server_that_wants_credentials(guarded_prometheus: str, tmp_path: Path) -> None:
    line = one_line_error(nvwatch(*report_args(guarded_prometheus, tmp_path)))
    assert "refused access (HTTP 401)" in line


def test_a_query_the_server_rejects(guarded_prometheus: str, tmp_path: Path) -> None:
    secret = tmp_path / "password"
    secret.write_text(PASSWORD + "\n")
    args = report_args(
        guarded_prometheus,
        tmp_path / "out",
        "--basic-auth-user",
        USER,
        "--basic-auth-password-file",
        str(secret),
    )
    line = one_line_error(nvwatch(*args))
    # past the authentication, Prometheus refuses to load that many samples
    assert "Prometheus rejected" in line
    assert "too many samples" in line


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--range", "1x"), "invalid --range '1x'"),
        (("--range", "10m"), "invalid --range '10m': must be from 1h"),
        (("--end", "yesterday"), "--end 'yesterday': expected unix seconds"),
    ],
)
def test_bad_arguments(flags: tuple[str, ...], message: str, tmp_path: Path) -> None:
    args = report_args("http://127.0.0.1:1", tmp_path)
    for flag, value in zip(flags[::2], flags[1::2], strict=True):
        args[args.index(flag) + 1] = value
    assert message in one_line_error(nvwatch(*args))


def test_a_bad_url(tmp_path: Path) -> None:
    line = one_line_error(nvwatch(*report_args("localhost:9090", tmp_path)))
    assert "expected http(s)://host:port" in line


def test_without_matplotlib_the_report_says_how_to_install_it(tmp_path: Path) -> None:
    result = nvwatch(
        *report_args("http://127.0.0.1:1", tmp_path),
        setup="import sys; sys.modules['matplotlib'] = None",
    )
    assert "pip install 'nvwatch[report]'" in one_line_error(result)


@pytest.mark.parametrize(
    ("flags", "outcome"),
    [
        ((), "CERTIFICATE_VERIFY_FAILED"),  # a CA the system does not know
        (("--ca-file", "CA"), "too many samples"),  # through TLS, to the sample limit
        (("--insecure-skip-verify",), "too many samples"),
    ],
)
def test_https(
    tls_prometheus: str, certs: Certs, tmp_path: Path, flags: tuple[str, ...], outcome: str
) -> None:
    args = report_args(
        tls_prometheus, tmp_path, *(str(certs.ca) if f == "CA" else f for f in flags)
    )
    assert outcome in one_line_error(nvwatch(*args))


def test_a_bearer_token_is_sent(tmp_path: Path) -> None:
    """What the client sends, seen by a loopback server that answers as Prometheus does
    to a query it cannot parse (Prometheus itself does not check bearer tokens)."""
    seen: list[str | None] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            seen.append(self.headers.get("Authorization"))
            body = b'{"status":"error","errorType":"bad_data","error":"parse error"}'
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        token = tmp_path / "token"
        token.write_text("s3cret-token\n")
        url = f"http://127.0.0.1:{server.server_address[1]}"
        args = report_args(url, tmp_path / "out", "--bearer-token-file", str(token))
        line = one_line_error(nvwatch(*args))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
    assert "Prometheus rejected" in line and "parse error" in line
    assert seen and set(seen) == {"Bearer s3cret-token"}


def test_timings_say_where_the_time_went(synthetic_report: SyntheticReport, tmp_path: Path) -> None:
    """Every query the report sent, with the series Prometheus answered it with; every
    phase in the order it ran, and the total their sum."""
    out, path = tmp_path / "out", tmp_path / "timings.json"
    args = [*report_args(synthetic_report.url, out), "--timings", str(path)]
    assert nvwatch(*args).returncode == 0
    timings = json.loads(path.read_text())
    phases = timings["phases"]
    assert list(phases)[:3] == ["source", "queries", "allocations"]
    assert list(phases)[-1] == "writing"
    assert "section utilization" in phases and "section stragglers" in phases
    assert timings["total_seconds"] == pytest.approx(sum(phases.values()), abs=0.01)
    seconds = [q["seconds"] for q in timings["queries"]]
    assert seconds == sorted(seconds, reverse=True)  # the slowest first
    assert all(q["requests"] == 1 for q in timings["queries"])  # no range refused here
    by_name = {q["name"]: q for q in timings["queries"]}
    assert len(by_name) == len(timings["queries"])
    # each query's series as the server answers: the GPUs' up series, one per GPU it holds
    client = PrometheusClient(Connection(synthetic_report.url))
    held = f"count(group by (instance, gpu) (last_over_time(nvwatch_gpu_up[{synthetic.DAYS}d])))"
    [(_, (_, count))] = client.query(held, synthetic.END)
    gpus = int(count)
    assert by_name["gpu_up"]["series"] == gpus > 0
    assert 0 < max(seconds) <= phases["queries"] + 0.01
