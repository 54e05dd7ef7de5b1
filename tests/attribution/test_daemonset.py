"""deploy/kubernetes/daemonset.yaml runs attribution with what it needs mounted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from nvwatch.agent.cli import cli
from nvwatch.agent.cli.options import build_config
from nvwatch.agent.sources.attribution.kubepods import checkpoint_path

DAEMONSET = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "daemonset.yaml"


def _manifest() -> Any:
    return yaml.safe_load(DAEMONSET.read_text())


def _flag(args: list[str], name: str) -> str:
    return next(a.split("=", 1)[1] for a in args if a.startswith(f"--{name}="))


def test_the_daemonset_is_a_valid_kubernetes_object() -> None:
    kubernetes_validate.validate(_manifest(), "1.29.0", strict=True)


def test_the_kubelet_socket_and_checkpoint_directories_are_mounted_read_only() -> None:
    spec = _manifest()["spec"]["template"]["spec"]
    [container] = spec["containers"]
    args = container["args"]
    socket = Path(_flag(args, "kubelet-socket"))
    mounts = {Path(m["mountPath"]): m for m in container["volumeMounts"]}
    for needed in (socket.parent, checkpoint_path(socket).parent, Path(_flag(args, "proc-root"))):
        assert needed in mounts, f"{needed} is not mounted"
        assert mounts[needed]["readOnly"] is True
    assert "kubernetes" in _flag(args, "attribution").split(",")


def test_the_daemonset_args_parse_into_the_agent_config() -> None:
    [container] = _manifest()["spec"]["template"]["spec"]["containers"]
    serve = cli.commands["serve"]  # type: ignore[attr-defined]
    with serve.make_context("serve", list(container["args"])) as ctx:
        config = build_config(ctx.params)
    assert config.attribution == ("kubernetes",)
    assert config.proc_root == Path("/host/proc")
    assert config.kubelet_socket == Path("/var/lib/kubelet/pod-resources/kubelet.sock")
