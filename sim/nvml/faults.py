"""A wrapper library that fails a fraction of calls, to test the agent's error handling."""

from __future__ import annotations

import random
import threading
from collections.abc import Sequence
from typing import Any

import pynvml

from nvwatch.sim.nvml.abi import (
    ERROR_GPU_IS_LOST,
    ERROR_NOT_SUPPORTED,
    ERROR_TIMEOUT,
    ERROR_UNKNOWN,
)

DEFAULT_FAULT_CODES = (
    ERROR_UNKNOWN,
    ERROR_TIMEOUT,
    ERROR_NOT_SUPPORTED,
    ERROR_GPU_IS_LOST,
    pynvml.NVML_ERROR_NO_DATA,
)
# calls that decide whether there is a library at all; failing them tests nothing useful
_SPARED = frozenset({"nvmlInitWithFlags", "nvmlInit_v2", "nvmlShutdown", "nvmlErrorString"})


class FaultInjectingNvml:
    """Wraps a library so that a fraction `rate` of calls fail with a random NVML error."""

    def __init__(
        self,
        inner: object,
        rate: float,
        seed: int = 0,
        codes: Sequence[int] = DEFAULT_FAULT_CODES,
    ) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError("rate must be within 0..1")
        self.inner = inner
        self.rate = rate
        self.codes = tuple(codes)
        self.injected = 0  # how many calls were failed, for tests to check against
        self._random = random.Random(seed)
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.inner, name)  # AttributeError -> FunctionNotFound, as real
        if name in _SPARED or not callable(real):
            return real

        def maybe_fail(*args: Any) -> Any:
            with self._lock:
                fail = self._random.random() < self.rate
                code = self._random.choice(self.codes)
                if fail:
                    self.injected += 1
            return code if fail else real(*args)

        maybe_fail.__name__ = name
        return maybe_fail
