"""The kubelet pod-resources v1 API: which pod's container holds which device ids.

One gRPC `List` per refresh on the kubelet's Unix socket, bounded by a deadline. After
any failure the channel is closed and the next call dials afresh: a kubelet restart
replaces the socket, and a channel left alone would wait out gRPC's reconnect back-off
(up to two minutes) before it noticed the new one. The channel keeps its own subchannel
pool: gRPC shares subchannels between channels to one target by default, so a fresh
channel would inherit the old one's back-off and still fail for seconds after the
kubelet came back.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from nvwatch.agent.sources.attribution.podresources import api_pb2, api_pb2_grpc

# the kubelet's own limit for pod-resources responses is 16 MiB (a node of many pods);
# gRPC's default of 4 MiB would fail exactly on the nodes that need attribution most
_MAX_MESSAGE_BYTES = 16 << 20


class KubeletUnavailable(Exception):
    """The kubelet did not answer; the message, one line, says why."""


@dataclass(frozen=True)
class ContainerDevices:
    """Devices of one resource held by one container of one pod."""

    namespace: str
    pod: str
    container: str
    resource: str
    device_ids: tuple[str, ...]


class PodResourcesClient:
    def __init__(self, socket: Path, timeout: float) -> None:
        self.socket = socket
        self.timeout = timeout
        self._channel: Any = None
        self._lock = threading.Lock()  # close() may come from another thread than list()

    def list(self) -> list[ContainerDevices]:
        """Every container's devices, from one List call; KubeletUnavailable on failure."""
        if not self.socket.exists():
            self.close()
            raise KubeletUnavailable(f"kubelet socket {self.socket} does not exist")
        try:
            response = self._stub().List(api_pb2.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.RpcError as exc:
            self.close()  # dial again next time: the kubelet may have restarted
            raise KubeletUnavailable(_rpc_error(self.socket, exc)) from exc
        return [
            ContainerDevices(
                pod.namespace,
                pod.name,
                container.name,
                devices.resource_name,
                tuple(devices.device_ids),
            )
            for pod in response.pod_resources
            for container in pod.containers
            for devices in container.devices
        ]

    def _stub(self) -> Any:
        with self._lock:
            if self._channel is None:
                self._channel = grpc.insecure_channel(
                    f"unix://{self.socket.absolute()}",
                    options=[
                        ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
                        ("grpc.use_local_subchannel_pool", 1),
                    ],
                )
            # the generated module is untyped (scripts/gen-podresources writes no stub for it)
            return api_pb2_grpc.PodResourcesListerStub(self._channel)  # type: ignore[no-untyped-call]

    def close(self) -> None:
        with self._lock:
            channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()


def _rpc_error(socket: Path, exc: grpc.RpcError) -> str:
    code = exc.code() if isinstance(exc, grpc.Call) else None
    details = exc.details() if isinstance(exc, grpc.Call) else str(exc)
    name = code.name if code is not None else "error"
    first = " ".join(str(details or "").split())[:200]
    return f"kubelet pod-resources List on {socket}: {name}: {first}"
