"""What the simulator needs of the installed pynvml, checked before any of it loads.

The simulator sits under pynvml and touches its private attributes (the loaded library,
its lock, its reference count, its function-pointer cache) and needs the NVLink version
constants of 18-link Hopper. The agent itself needs far less (pyproject.toml's floor), so
a site may run an older or newer pynvml: there `--simulate` must refuse with one line,
not fail somewhere inside with a traceback.
"""

from __future__ import annotations

import pynvml

from nvwatch.agent.config import ConfigError

# tests/sim and tests/nvml passed on these; others may work if they have what is needed
TESTED = "13.610.43 and 13.615.71"
NEEDED = (
    "nvmlLib",
    "libLoadLock",
    "_nvmlLib_refcount",
    "_nvmlGetFunctionPointer_cache",
    "NVML_NVLINK_VERSION_1_0",
    "NVML_NVLINK_VERSION_2_0",
    "NVML_NVLINK_VERSION_3_0",
    "NVML_NVLINK_VERSION_4_0",
    "NVML_NVLINK_MAX_LINKS",
)


def missing() -> list[str]:
    return [name for name in NEEDED if not hasattr(pynvml, name)]


def require_pynvml() -> None:
    """ConfigError (one line, exit 2 from the command line) when something is missing."""
    absent = missing()
    if absent:
        version = getattr(pynvml, "__version__", None) or _installed_version()
        raise ConfigError(
            f"the simulator cannot run on the installed nvidia-ml-py {version}: it lacks "
            f"{', '.join(absent)} (tested with {TESTED}; pip install 'nvidia-ml-py>=13.610,<14')"
        )


def _installed_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("nvidia-ml-py")
    except metadata.PackageNotFoundError:
        return "(version unknown)"
