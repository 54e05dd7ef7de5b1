"""A real gRPC server implementing the kubelet's pod-resources v1 List on a Unix socket,
from the same generated stubs the agent uses, with pods a test sets and changes."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from nvwatch.agent.sources.attribution.podresources import api_pb2, api_pb2_grpc


@dataclass(frozen=True)
class Pod:
    namespace: str
    name: str
    # container name -> [(resource name, device ids)]
    containers: dict[str, list[tuple[str, list[str]]]]


class _Lister(api_pb2_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    def __init__(self) -> None:
        self.pods: Sequence[Pod] = ()
        self.calls = 0

    def List(self, request: Any, context: Any) -> Any:
        self.calls += 1
        return api_pb2.ListPodResourcesResponse(
            pod_resources=[
                api_pb2.PodResources(
                    name=pod.name,
                    namespace=pod.namespace,
                    containers=[
                        api_pb2.ContainerResources(
                            name=container,
                            devices=[
                                api_pb2.ContainerDevices(resource_name=r, device_ids=ids)
                                for r, ids in devices
                            ],
                        )
                        for container, devices in pod.containers.items()
                    ],
                )
                for pod in self.pods
            ]
        )


class FakeKubelet:
    """The pod-resources server; `stop()` and `start()` again model a kubelet restart
    (the socket file goes away and comes back)."""

    def __init__(self, socket: Path) -> None:
        self.socket = socket
        self.lister = _Lister()
        self._server: Any = None

    def set_pods(self, *pods: Pod) -> None:
        self.lister.pods = pods

    def start(self) -> None:
        self.socket.parent.mkdir(parents=True, exist_ok=True)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(self.lister, server)
        server.add_insecure_port(f"unix://{self.socket}")
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None
        self.socket.unlink(missing_ok=True)


@contextmanager
def fake_kubelet(socket: Path) -> Iterator[FakeKubelet]:
    kubelet = FakeKubelet(socket)
    kubelet.start()
    try:
        yield kubelet
    finally:
        kubelet.stop()
