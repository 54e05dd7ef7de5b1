"""nvwatch: per-node GPU/NVLink/InfiniBand telemetry agent for DGX-class clusters."""

# __version__ is looked up when first asked for, not at import: importlib.metadata reads
# the installed metadata through the email parser, a few hundred milliseconds on a busy
# node, and this package is imported before the entry point can catch a stop signal
# (agent/launch.py); a SIGINT in that window ended `nvwatch serve` with a traceback.


def __getattr__(name: str) -> str:
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("nvwatch")
    except PackageNotFoundError:  # running from a source tree that was never installed
        found = "0.0.0+source"
    globals()["__version__"] = found
    return found
