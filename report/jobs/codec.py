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


def encode(summary: dict[str, Any]) -> str:
    text = json.dumps(summary, sort_keys=True, separators=(",", ":"))
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
    return data


def _start(text: str) -> str:
    return text if len(text) <= 40 else text[:37] + "..."
