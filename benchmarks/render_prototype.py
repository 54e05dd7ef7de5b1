"""A prototype text renderer, for evidence only: what caching each series' prefix saves.

Not used by the agent. It renders the same families `build_exposition` hands to
prometheus_client, keeping `name{labels} ` for every series from one poll to the next
(label sets are stable between polls), so a poll formats only the values. The benchmark
checks that its bytes equal `generate_latest`'s before it reports a time.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import Metric
from prometheus_client.utils import floatToGoString

_HEADER_TYPES = {"counter": "counter", "gauge": "gauge"}


def _escape_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


class CachedPrefixRenderer:
    def __init__(self) -> None:
        self._prefixes: dict[tuple[str, tuple[tuple[str, str], ...]], str] = {}
        self._headers: dict[tuple[str, str, str], str] = {}

    def render(self, families: Iterable[Metric]) -> bytes | None:
        """Text format 0.0.4; None for a family type it does not handle."""
        out: list[str] = []
        prefixes = self._prefixes
        for metric in families:
            mtype = _HEADER_TYPES.get(metric.type)
            if mtype is None:
                return None
            name = metric.name + "_total" if mtype == "counter" else metric.name
            header_key = (name, mtype, metric.documentation)
            header = self._headers.get(header_key)
            if header is None:
                doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
                header = f"# HELP {name} {doc}\n# TYPE {name} {mtype}\n"
                self._headers[header_key] = header
            out.append(header)
            for sample in metric.samples:
                if sample.timestamp is not None or sample.exemplar is not None:
                    return None
                key = (sample.name, tuple(sample.labels.items()))
                prefix = prefixes.get(key)
                if prefix is None:
                    labels = ",".join(
                        f'{k}="{_escape_value(v)}"' for k, v in sorted(sample.labels.items())
                    )
                    prefix = f"{sample.name}{{{labels}}} " if labels else f"{sample.name} "
                    prefixes[key] = prefix
                value = floatToGoString(sample.value)  # type: ignore[no-untyped-call]
                out.append(prefix + value + "\n")
        return "".join(out).encode("utf-8")
