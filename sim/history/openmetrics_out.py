"""Writing timestamped samples as one OpenMetrics file that promtool can backfill.

OpenMetrics wants every sample of a family together, and within a family every sample of
one series together, in time order. A history hands over one node's series at a time;
each family's lines go to a spool file of their own (so a month of a large fleet never
sits in memory), and `close()` joins the spools under their HELP and TYPE lines, in the
order the families were declared, and ends the file with `# EOF`. The output appears
whole (written aside, then renamed) or not at all.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO

_FLUSH_LINES = 4096  # per family: spool writes in batches, not line by line


class OpenMetricsWriter:
    def __init__(
        self,
        path: Path,
        families: Sequence[str],
        *,
        type_of: Callable[[str], str],
        help_of: Callable[[str], str],
    ) -> None:
        self.path = path
        self.families = tuple(families)
        self._type_of = type_of
        self._help_of = help_of
        path.parent.mkdir(parents=True, exist_ok=True)
        self._spool = Path(tempfile.mkdtemp(prefix=".openmetrics-", dir=path.parent))
        self._files: dict[str, IO[str]] = {}
        self._pending: dict[str, list[str]] = {name: [] for name in self.families}
        self.samples = 0

    def add_series(
        self, family: str, labels: str, stamps: Sequence[str], values: Iterable[float]
    ) -> None:
        """Every sample of one series: `family` is the sample name (counters end in
        _total), `labels` rendered as `{a="b",...}`, `stamps` the timestamps as
        `stamp()` renders them, in time order, one per value."""
        prefix = f"{family}{labels} "
        lines = self._pending[family]
        count = len(lines)
        lines.extend(
            f"{prefix}{value!r}{stamp}" for value, stamp in zip(values, stamps, strict=True)
        )
        self.samples += len(lines) - count
        if len(lines) >= _FLUSH_LINES:
            self._flush(family)

    def add_histogram(
        self,
        family: str,
        labels: str,
        bounds: Sequence[float],
        stamps: Sequence[str],
        points: Iterable[tuple[Sequence[int], int, float]],
    ) -> None:
        """Every point of one histogram series: `labels` rendered without the closing
        brace (`{a="b"`, so `le` can follow), each point its cumulative bucket counts (one
        per bound), count and sum. OpenMetrics keeps a point's samples together: at each
        timestamp the buckets (ascending, then +Inf), `_count`, `_sum`."""
        sep = "," if labels != "{" else ""
        les = [f'{sep}le="{float(b)!r}"}}' for b in bounds] + [f'{sep}le="+Inf"}}']
        lines = self._pending[family]
        count = len(lines)
        for (buckets, total, summed), stamp in zip(points, stamps, strict=True):
            for le, value in zip(les, (*buckets, total), strict=True):
                lines.append(f"{family}_bucket{labels}{le} {value}{stamp}")
            lines.append(f"{family}_count{labels}}} {total}{stamp}")
            lines.append(f"{family}_sum{labels}}} {float(summed)!r}{stamp}")
        self.samples += len(lines) - count
        if len(lines) >= _FLUSH_LINES:
            self._flush(family)

    def _flush(self, family: str) -> None:
        lines = self._pending[family]
        if not lines:
            return
        spool = self._files.get(family)
        if spool is None:
            spool = self._files[family] = (self._spool / family).open("w", encoding="utf-8")
        spool.write("".join(lines))
        lines.clear()

    def close(self) -> None:
        """Join the spools into the output file (written aside, renamed into place)."""
        try:
            for family in self.families:
                self._flush(family)
            for spool in self._files.values():
                spool.close()
            partial = self.path.with_name(f".{self.path.name}.partial")
            with partial.open("w", encoding="utf-8") as out:
                for family in self.families:
                    if family not in self._files:
                        continue  # no sample: no family (an XID that never happened)
                    kind = self._type_of(family)
                    name = family.removesuffix("_total") if kind == "counter" else family
                    out.write(f"# HELP {name} {_escape_help(self._help_of(family))}\n")
                    out.write(f"# TYPE {name} {kind}\n")
                    with (self._spool / family).open(encoding="utf-8") as spool:
                        shutil.copyfileobj(spool, out, 1 << 20)
                out.write("# EOF\n")
            os.replace(partial, self.path)
        finally:
            self.discard()

    def discard(self) -> None:
        for spool in self._files.values():
            spool.close()
        self._files.clear()
        shutil.rmtree(self._spool, ignore_errors=True)


def stamp(timestamp: float) -> str:
    """A sample's timestamp (Unix seconds) as it ends its line."""
    return f" {int(timestamp) if float(timestamp).is_integer() else timestamp!r}\n"


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")
