"""The committed pod-resources stubs are exactly what scripts/gen-podresources writes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = Path("agent/sources/attribution/podresources")
GENERATED = ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py")


def test_committed_stubs_match_a_fresh_generation(tmp_path: Path) -> None:
    (tmp_path / PACKAGE).mkdir(parents=True)
    shutil.copy(REPO / PACKAGE / "api.proto", tmp_path / PACKAGE / "api.proto")
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "gen-podresources", tmp_path / "scripts")
    subprocess.run(
        [str(tmp_path / "scripts" / "gen-podresources")],
        env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
        check=True,
        timeout=120,
    )
    for name in GENERATED:
        fresh = (tmp_path / PACKAGE / name).read_bytes()
        assert fresh == (REPO / PACKAGE / name).read_bytes(), (
            f"{PACKAGE / name} differs from what scripts/gen-podresources writes: run it"
        )


def test_the_proto_is_the_published_v1_service() -> None:
    """The wire names the kubelet serves: package v1, service PodResourcesLister, List."""
    from nvwatch.agent.sources.attribution.podresources import api_pb2

    service = api_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert service.full_name == "v1.PodResourcesLister"
    assert {m.name for m in service.methods} >= {"List"}
