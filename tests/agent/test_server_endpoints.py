"""Every path the server answers: who may call it, and which one sends anything out.

docs/security.md's endpoint table states both; these tests hold it to them on a real
server, with a BMC reader that records every read (the one thing that sends packets).
"""

from __future__ import annotations

import base64
import time
import urllib.error
import urllib.request
from pathlib import Path

import bcrypt

from nvwatch.agent.server.probe import ProbeService
from tests.agent.fakes import CountingHostSource
from tests.agent.server_helpers import Served, serving, web_config
from tests.agent.test_probe import MODULE, Bmcs, render

PATHS = {"/metrics": 200, "/healthz": 200, "/livez": 200, "/": 200, "/nope": 404}
PROBE = "/probe?target=bmc-2&module=default"


def _status(served: Served, path: str, password: str | None = None) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{served.port}{path}")
    if password is not None:
        token = base64.b64encode(f"prometheus:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            reply.read()
            return int(reply.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def _probe(bmcs: Bmcs) -> ProbeService:
    return ProbeService({"default": MODULE}, bmcs, render)  # type: ignore[arg-type]


def test_with_basic_auth_every_path_needs_credentials_probe_included(tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"right", bcrypt.gensalt(4)).decode()
    web = web_config(tmp_path, f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    bmcs = Bmcs()
    probe = _probe(bmcs)
    try:
        with serving(web, probe=probe.respond) as served:
            for path in [*PATHS, PROBE]:
                assert _status(served, path) == 401, path
                assert _status(served, path, "wrong") == 401, path
            # nothing was sent to the BMC for an unauthenticated probe
            assert bmcs.reads == []
            for path, status in PATHS.items():
                assert _status(served, path, "right") == status, path
            assert _status(served, PROBE, "right") == 200
    finally:
        probe.close()
    assert bmcs.reads == ["bmc-2"]


def test_only_probe_sends_anything_out_the_other_paths_copy_cached_bytes() -> None:
    bmcs = Bmcs()
    probe = _probe(bmcs)
    try:
        with serving(probe=probe.respond) as served:
            served.agent.poller.pause()
            time.sleep(0.3)  # an in-flight poll finishes
            source = served.agent.sources[0]
            assert isinstance(source, CountingHostSource)
            polls = source.calls
            for _ in range(3):
                for path, status in PATHS.items():
                    assert _status(served, path) == status, path
            # no source was called (they read the hardware on the poll's timer) and no BMC
            assert source.calls == polls and bmcs.reads == []
            assert _status(served, PROBE) == 200
    finally:
        probe.close()
    assert bmcs.reads == ["bmc-2"]
