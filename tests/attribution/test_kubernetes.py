"""Kubernetes attribution against a real gRPC pod-resources server on a Unix socket."""

from __future__ import annotations

import json
from pathlib import Path

from nvwatch.agent.sources.attribution.kubernetes import KubernetesResolver
from nvwatch.agent.sources.attribution.model import GpuRef, InstanceRef, Owner
from nvwatch.agent.sources.attribution.procfs import ProcFS
from tests.attribution.conftest import ProcTree, Spawn
from tests.attribution.kubelet_server import Pod, fake_kubelet

GPU = "nvidia.com/gpu"
UUIDS = [f"GPU-00000000-0000-0000-0000-00000000000{i}" for i in range(4)]
MIG = "MIG-11111111-2222-3333-4444-555555555555"
UID_A = "3f1c2d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f"
UID_B = "9e8d7c6b-5a49-4837-a625-14f3e2d1c0b9"
# the pod cgroup layouts of the two cgroup drivers
SYSTEMD_CGROUP = (
    "0::/kubepods.slice/kubepods-besteffort.slice/"
    f"kubepods-besteffort-pod{UID_A.replace('-', '_')}.slice/cri-containerd-{'a' * 64}.scope"
)
CGROUPFS_CGROUP = f"4:memory:/kubepods/burstable/pod{UID_B}/{'b' * 64}"


def _gpus(pids: dict[int, tuple[int, ...]] | None = None) -> list[GpuRef]:
    pids = pids or {}
    gpus = [GpuRef(i, uuid, pids.get(i, ())) for i, uuid in enumerate(UUIDS)]
    gpus[3] = GpuRef(3, UUIDS[3], instances=(InstanceRef(2, MIG, pids.get(3, ())),))
    return gpus


def _owner(namespace: str, pod: str, container: str) -> Owner:
    return Owner("kubernetes", pod=pod, namespace=namespace, container=container)


def test_devices_of_every_kind_become_allocations(tmp_path: Path, proc_tree: ProcTree) -> None:
    with fake_kubelet(tmp_path / "pod-resources" / "kubelet.sock") as kubelet:
        kubelet.set_pods(
            Pod("ml", "train-0", {"worker": [(GPU, [UUIDS[0]]), ("example.com/nic", ["eth1"])]}),
            Pod("ml", "infer-1", {"server": [(GPU, [f"{UUIDS[1]}::3"])]}),  # time-sliced
            Pod("batch", "idx", {"main": [(GPU, ["2"])]}),  # the plugin's index strategy
            Pod("batch", "small", {"main": [("nvidia.com/mig-1g.10gb", [MIG])]}),
            Pod("other", "gone", {"main": [(GPU, ["GPU-not-on-this-node"])]}),
        )
        resolver = KubernetesResolver(ProcFS(proc_tree.root), kubelet.socket, timeout=5)
        found = resolver.resolve(_gpus())
        resolver.close()
    assert found.error is None
    assert [(a.gpu, a.uuid, a.owner) for a in found.allocations] == [
        (0, UUIDS[0], _owner("ml", "train-0", "worker")),
        (1, UUIDS[1], _owner("ml", "infer-1", "server")),
        (2, UUIDS[2], _owner("batch", "idx", "main")),
        (3, MIG, _owner("batch", "small", "main")),
    ]


def test_a_restarted_kubelet_is_reconnected(tmp_path: Path, proc_tree: ProcTree) -> None:
    socket = tmp_path / "pod-resources" / "kubelet.sock"
    with fake_kubelet(socket) as kubelet:
        kubelet.set_pods(Pod("ml", "train-0", {"worker": [(GPU, [UUIDS[0]])]}))
        resolver = KubernetesResolver(ProcFS(proc_tree.root), socket, timeout=2)
        assert len(resolver.resolve(_gpus()).allocations) == 1
        kubelet.stop()  # the kubelet restarts: its socket goes away
        down = resolver.resolve(_gpus())
        assert down.allocations == ()
        assert down.error is not None and str(socket) in down.error
        socket.touch()  # a socket path nothing listens on: the call itself fails
        refused = resolver.resolve(_gpus())
        assert refused.allocations == ()
        assert refused.error is not None and "UNAVAILABLE" in refused.error
        socket.unlink()
        kubelet.set_pods(Pod("ml", "train-1", {"worker": [(GPU, [UUIDS[1]])]}))
        kubelet.start()  # ... and comes back on a new socket at the same path
        back = resolver.resolve(_gpus())
        resolver.close()
    assert back.error is None
    assert [(a.gpu, a.owner.pod) for a in back.allocations] == [(1, "train-1")]


def test_the_pid_of_a_pod_on_its_own_gpu(tmp_path: Path, proc_tree: ProcTree, spawn: Spawn) -> None:
    in_pod, on_host = spawn().pid, spawn().pid
    proc_tree.add(in_pod, SYSTEMD_CGROUP)
    proc_tree.add(on_host, "0::/system.slice/sshd.service")  # sees the GPU, is no pod's
    with fake_kubelet(tmp_path / "kubelet.sock") as kubelet:
        kubelet.set_pods(Pod("ml", "train-0", {"worker": [(GPU, [UUIDS[0]])]}))
        resolver = KubernetesResolver(ProcFS(proc_tree.root), kubelet.socket, timeout=5)
        found = resolver.resolve(_gpus({0: (in_pod, on_host)}))
        resolver.close()
    assert dict(found.pid_owners) == {in_pod: _owner("ml", "train-0", "worker")}


def test_pods_sharing_a_gpu_are_told_apart_by_the_pid_cgroup(
    tmp_path: Path, proc_tree: ProcTree, spawn: Spawn
) -> None:
    pid_a, pid_b = spawn().pid, spawn().pid
    proc_tree.add(pid_a, SYSTEMD_CGROUP)
    proc_tree.add(pid_b, CGROUPFS_CGROUP)
    kubelet_root = tmp_path / "kubelet"
    (kubelet_root / "device-plugins").mkdir(parents=True)
    # the device manager's checkpoint: pod UIDs with their containers' device ids
    (kubelet_root / "device-plugins" / "kubelet_internal_checkpoint").write_text(
        json.dumps(
            {
                "Data": {
                    "PodDeviceEntries": [
                        {
                            "PodUID": UID_A,
                            "ContainerName": "a",
                            "ResourceName": GPU,
                            "DeviceIDs": {"0": [f"{UUIDS[0]}::0"]},
                            "AllocResp": "",
                        },
                        {
                            "PodUID": UID_B,
                            "ContainerName": "b",
                            "ResourceName": GPU,
                            "DeviceIDs": {"1": [f"{UUIDS[0]}::1"]},
                            "AllocResp": "",
                        },
                    ],
                    "RegisteredDevices": {GPU: [f"{UUIDS[0]}::0", f"{UUIDS[0]}::1"]},
                },
                "Checksum": 1,
            }
        )
    )
    with fake_kubelet(kubelet_root / "pod-resources" / "kubelet.sock") as kubelet:
        kubelet.set_pods(
            Pod("team-a", "job-a", {"a": [(GPU, [f"{UUIDS[0]}::0"])]}),
            Pod("team-b", "job-b", {"b": [(GPU, [f"{UUIDS[0]}::1"])]}),
        )
        resolver = KubernetesResolver(ProcFS(proc_tree.root), kubelet.socket, timeout=5)
        found = resolver.resolve(_gpus({0: (pid_a, pid_b)}))
        resolver.close()
    assert found.error is None
    assert [a.owner.pod for a in found.allocations] == ["job-a", "job-b"]
    assert dict(found.pid_owners) == {
        pid_a: _owner("team-a", "job-a", "a"),
        pid_b: _owner("team-b", "job-b", "b"),
    }


def test_shared_gpu_without_a_checkpoint_is_an_error_not_a_guess(
    tmp_path: Path, proc_tree: ProcTree, spawn: Spawn
) -> None:
    pid = spawn().pid
    proc_tree.add(pid, SYSTEMD_CGROUP)
    with fake_kubelet(tmp_path / "pod-resources" / "kubelet.sock") as kubelet:
        kubelet.set_pods(
            Pod("team-a", "job-a", {"a": [(GPU, [f"{UUIDS[0]}::0"])]}),
            Pod("team-b", "job-b", {"b": [(GPU, [f"{UUIDS[0]}::1"])]}),
        )
        resolver = KubernetesResolver(ProcFS(proc_tree.root), kubelet.socket, timeout=5)
        found = resolver.resolve(_gpus({0: (pid,)}))
        resolver.close()
    assert len(found.allocations) == 2  # both pods still hold the GPU
    assert dict(found.pid_owners) == {}
    assert found.error is not None and "kubelet_internal_checkpoint" in found.error
