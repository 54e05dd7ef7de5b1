"""Sources with scripted behaviour, for testing the pipeline without hardware."""

from __future__ import annotations

import threading

from nvwatch.agent.sources import SourceUnavailable
from nvwatch.agent.sources.host import HostSample


def host_sample(load: float = 1.5) -> HostSample:
    return HostSample(
        cpu_utilization_ratio=0.25,
        cpu_iowait_ratio=0.05,
        memory_used_bytes=8 * 2**30,
        memory_total_bytes=64 * 2**30,
        load1=load,
    )


class CountingHostSource:
    """Answers like the host source and counts calls, to prove scrapes do no I/O."""

    name = "host"

    def __init__(self) -> None:
        self.calls = 0

    def collect(self) -> HostSample:
        self.calls += 1
        return host_sample(load=float(self.calls))

    def close(self) -> None:
        pass


class RaisingSource:
    def __init__(self, name: str, exc: Exception) -> None:
        self.name = name
        self.exc = exc

    def collect(self) -> object:
        raise self.exc

    def close(self) -> None:
        pass


class HangingSource:
    """Blocks in collect() until released, like a wedged native call."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.release = threading.Event()
        self.entered = threading.Event()
        self.calls = 0

    def collect(self) -> object:
        self.calls += 1
        self.entered.set()
        self.release.wait(30)
        return host_sample()

    def close(self) -> None:
        self.release.set()


class GarbageSource:
    """Returns something that is not its sample type."""

    def __init__(self, name: str, value: object) -> None:
        self.name = name
        self.value = value

    def collect(self) -> object:
        return self.value

    def close(self) -> None:
        pass


class UnavailableSource(RaisingSource):
    def __init__(self, name: str, reason: str) -> None:
        super().__init__(name, SourceUnavailable(reason))
