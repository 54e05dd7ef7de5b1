"""nvwatch: per-node GPU/NVLink/InfiniBand telemetry agent for DGX-class clusters."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("nvwatch")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+source"
