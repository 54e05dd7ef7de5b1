"""Logging set-up: human text by default, JSON lines for log shippers."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Sequence


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class _Quiet(logging.Filter):
    """Drops records below ERROR from the named loggers (and their children)."""

    def __init__(self, names: Sequence[str]) -> None:
        super().__init__()
        self._names = tuple(names)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= logging.ERROR:
            return True
        return not any(
            record.name == name or record.name.startswith(name + ".") for name in self._names
        )


def configure(log_format: str, level: int = logging.INFO, quiet: Sequence[str] = ()) -> None:
    """Log to stderr at `level`; `quiet` loggers only from ERROR up (a command that
    prints what they would say, such as `doctor`, names them)."""
    handler = logging.StreamHandler(sys.stderr)
    if quiet:
        handler.addFilter(_Quiet(quiet))
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter(
                "%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%S"
            )
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
