"""nvmlDeviceGetComputeRunningProcesses_v3 in one driver call where pynvml makes two.

pynvml asks for the count first (a call with no room) and then for the list; every
call is an ioctl into the driver on a real node. NVML fills a buffer that is large
enough and answers InsufficientSize (with the count) when it is not, so offering room
up front takes one call in the common case, through pynvml's own function lookup and
return check. Should a future pynvml lack those helpers, its public function does it.
"""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml

#: Room offered on the first try: more processes than a GPU usually runs.
FIRST_ROOM = 32
#: Tries in all; the list can grow between two calls (pynvml oversizes the same way).
TRIES = 3


def compute_processes(handle: Any) -> list[Any]:
    """The GPU's compute processes (structs with pid, usedGpuMemory, gpuInstanceId and
    computeInstanceId; usedGpuMemory is NVML's not-available value where unknown)."""
    lookup = getattr(pynvml, "_nvmlGetFunctionPointer", None)
    check = getattr(pynvml, "_nvmlCheckReturn", None)
    info = getattr(pynvml, "c_nvmlProcessInfo_v3_t", None)
    if lookup is None or check is None or info is None:
        return list(pynvml.nvmlDeviceGetComputeRunningProcesses_v3(handle))
    function = lookup("nvmlDeviceGetComputeRunningProcesses_v3")
    room = FIRST_ROOM
    for _ in range(TRIES):
        count = ctypes.c_uint(room)
        infos = (info * room)()
        code = function(handle, ctypes.byref(count), infos)
        if code != pynvml.NVML_ERROR_INSUFFICIENT_SIZE:
            check(code)
            return list(infos[: count.value])
        room = count.value * 2 + 5
    raise pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
