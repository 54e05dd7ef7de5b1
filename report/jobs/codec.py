"""A job summary as text for a Slurm AdminComment: `NVW1:` + base32(LZMA(JSON)).

jobstats (Princeton) keeps its summaries in the same field behind `JS1:`; the prefix
tells the two apart, so neither tool reads or overwrites the other's. Base32, not
base64: `sacctmgr update job ... set AdminComment=` lowercases what it stores (Slurm
22.05, measured in tests/slurm/test_job_store.py), and base32 decodes again once upper-
cased; raw LZMA2 (no container) wins back what base32's longer text costs.

AdminComment is a text column in slurmdbd's database; keeping ours within LIMIT_BYTES
leaves room and keeps `sacct` output readable. A summary too large (hundreds of GPUs)
drops its per-GPU and per-port rows before it fails: the job's totals and its notes are
what a review reads after retention.
"""

from __future__ import annotations

import base64
import binascii
import json
import lzma
from typing import Any

PREFIX = "NVW1:"
JOBSTATS_PREFIX = "JS1:"
LIMIT_BYTES = 4096


class StoreError(Exception):
    """A summary that cannot be stored or read back: one line for the user."""


_COLUMNS = "_columns"
# a 64 KiB dictionary: the text is a few KB, and a decoder allocates the dictionary
_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 9, "dict_size": 1 << 16}]


def encode(summary: dict[str, Any]) -> str:
    packed = {k: _to_columns(v) for k, v in summary.items()}
    text = json.dumps(packed, sort_keys=True, separators=(",", ":"))
    blob = lzma.compress(text.encode(), format=lzma.FORMAT_RAW, filters=_FILTERS)
    return PREFIX + base64.b32encode(blob).decode("ascii").rstrip("=")


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
    return text.upper().startswith(PREFIX)


def is_jobstats(text: str) -> bool:
    return text.upper().startswith(JOBSTATS_PREFIX)


def decode(text: str) -> dict[str, Any]:
    text = text.strip()
    if is_jobstats(text):
        raise StoreError("the AdminComment was written by jobstats (JS1:), not by nvwatch")
    if not is_ours(text):
        raise StoreError(f"the AdminComment is not an nvwatch summary: {_start(text)!r}")
    body = text[len(PREFIX) :].upper()
    try:
        blob = base64.b32decode(body + "=" * (-len(body) % 8))
        data = json.loads(lzma.decompress(blob, format=lzma.FORMAT_RAW, filters=_FILTERS))
    except (binascii.Error, lzma.LZMAError, ValueError) as err:
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
