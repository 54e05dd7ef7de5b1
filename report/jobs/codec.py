"""A job summary as text for a Slurm AdminComment: `NVW1:` + base64(zlib(JSON)).

The format is jobstats' (Princeton), whose epilog writes `JS1:` and the same kind of
blob into the same field; the prefix tells the two apart, so neither tool reads or
overwrites the other's. AdminComment is a text column in slurmdbd's database; keeping
ours within LIMIT_BYTES leaves room and keeps `sacct` output readable. A summary too large
(hundreds of GPUs) drops its per-GPU and per-port rows before it fails: the job's totals
and its notes are what a review reads after retention.
"""

from __future__ import annotations

import base64
import binascii
import json
import zlib
from typing import Any

PREFIX = "NVW1:"
JOBSTATS_PREFIX = "JS1:"
LIMIT_BYTES = 4096


class StoreError(Exception):
    """A summary that cannot be stored or read back: one line for the user."""


_COLUMNS = "_columns"


def encode(summary: dict[str, Any]) -> str:
    packed = {k: _to_columns(v) for k, v in summary.items()}
    text = json.dumps(packed, sort_keys=True, separators=(",", ":"))
    return PREFIX + base64.b64encode(zlib.compress(text.encode(), 9)).decode("ascii")


def encode_within(summary: dict[str, Any], limit: int = LIMIT_BYTES) -> str:
    """`encode`, with the per-GPU and per-port rows dropped when the whole is too large."""
    encoded = encode(summary)
    if len(encoded) <= limit:
        return encoded
    slim = {**summary, "gpus": [], "ports": [], "truncated": True}
    encoded = encode(slim)
    if len(encoded) > limit:
        raise StoreError(f"the job's summary is {len(encoded)} bytes even without its rows")
    return encoded


def is_ours(text: str) -> bool:
    return text.startswith(PREFIX)


def decode(text: str) -> dict[str, Any]:
    text = text.strip()
    if text.startswith(JOBSTATS_PREFIX):
        raise StoreError("the AdminComment was written by jobstats (JS1:), not by nvwatch")
    if not text.startswith(PREFIX):
        raise StoreError(f"the AdminComment is not an nvwatch summary: {_start(text)!r}")
    try:
        data = json.loads(zlib.decompress(base64.b64decode(text[len(PREFIX) :], validate=True)))
    except (binascii.Error, zlib.error, ValueError) as err:
        raise StoreError(f"the stored nvwatch summary is corrupt ({err})") from None
    if not isinstance(data, dict):
        raise StoreError("the stored nvwatch summary is not an object")
    return {k: _from_columns(v) for k, v in data.items()}


def _to_columns(value: Any) -> Any:
    """Rows of one shape (a job's GPUs, its ports) as one list per field: like figures
    side by side compress to two thirds of the rows' size."""
    if not (isinstance(value, list) and value and all(isinstance(r, dict) for r in value)):
        return value
    keys = sorted(value[0])
    if any(sorted(row) != keys for row in value):
        return value
    return {_COLUMNS: {k: [row[k] for row in value] for k in keys}}


def _from_columns(value: Any) -> Any:
    if not (isinstance(value, dict) and set(value) == {_COLUMNS}):
        return value
    columns = value[_COLUMNS]
    if not isinstance(columns, dict) or len({len(c) for c in columns.values()}) > 1:
        raise StoreError("the stored nvwatch summary is corrupt (uneven columns)")
    count = len(next(iter(columns.values()), []))
    return [{k: c[i] for k, c in columns.items()} for i in range(count)]


def _start(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."
