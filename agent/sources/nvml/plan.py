"""One GPU's plan: what its field batch asks for, and where each reading comes from.

Each field family (fields.py) is decided once per GPU from the first answer: "field"
when the batch serves it, "call" when every entry said NotSupported (or
InvalidArgument: an id the driver does not know), the batch call itself is missing, or
the family has no field id (the reader then uses the per-call function). The decision
sticks, so a counter never switches between two sources from one poll to the next (they
need not agree, and a switch would look like a counter going backwards without a reset).

Everything the hot path derives from the decisions and the NVLink links -- the packed
request, each family's place in the answer, the families left to their calls, each
link's sources -- is made by one function (`_build`) into one frozen `GpuPlan`. A poll
that takes a decision, and a probe that finds links, make a new plan; nothing derived is
kept anywhere else, so nothing can be left behind when one of the two changes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import pynvml

from nvwatch.agent.sources.nvml.device import DOWN_CODES, Device
from nvwatch.agent.sources.nvml.fields import (
    GPU_FIELDS,
    NO_ANSWERS,
    FieldAnswers,
    FieldIds,
    decode_answer,
    pack_request,
    request_field_values,
)
from nvwatch.agent.sources.nvml.nvlink import Link, LinkPlan, field_families, link_plans

FIELD_MODE = "field"
CALL_MODE = "call"

# An entry's answers that mean "this driver has no such field here": NotSupported, and
# InvalidArgument, which a driver older than the field id may answer for an id it does
# not know. Either way the call is the one to ask.
_NO_FIELD = frozenset({pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT})

# a position past the end of a short answer: neither "no such field" nor success
_UNANSWERED = -1


@dataclass(frozen=True)
class GpuPlan:
    """One GPU's field request and reading sources, for one set of links and decisions.

    Made only by `_build`; `read` hands back a new plan when the answer decided
    something, `relinked` when the links changed. Nothing here is mutated after."""

    links: tuple[Link, ...]  # the NVLink links, in probe order
    modes: Mapping[str, str]  # family -> FIELD_MODE / CALL_MODE, for decided families
    ids: tuple[tuple[int, int], ...]  # the request: every family's ids but "call" ones
    request: bytes  # `ids` packed as the request array
    spans: Mapping[str, tuple[int, int]]  # each asked family's (first entry, entries)
    undecided: tuple[str, ...]  # asked families whose mode the next answer decides
    call_families: frozenset[str]  # families decided "call"
    nvlinks: tuple[LinkPlan, ...]  # one per link, in `links` order

    def by_call(self, family: str) -> bool:
        """True when the family's readers must use the per-call function instead."""
        return family in self.call_families

    def relinked(self, links: Sequence[Link]) -> GpuPlan:
        """The plan for a new set of links; the decisions taken so far hold."""
        return _build(tuple(links), self.modes)

    def read(self, dev: Device) -> tuple[FieldAnswers, GpuPlan]:
        """One nvmlDeviceGetFieldValues for every family not decided "call": this poll's
        answers, and the plan its readers follow (this one, or a new one where the
        answer decided a family: a family found "call" is read by its call this poll).

        Raises GpuDown when an entry carries one of the codes that mean the GPU is gone.
        """
        if not self.ids:
            return NO_ANSWERS, self
        raw = dev.call("field_values", request_field_values, self.ids, self.request)
        if raw is None:
            if dev.is_unsupported("field_values"):
                missing = {f: CALL_MODE for f in self.spans if f not in self.modes}
                return NO_ANSWERS, self._decided(missing)
            return NO_ANSWERS, self
        values, failed = decode_answer(raw, len(self.ids))
        for status in failed.values():
            if status in DOWN_CODES:
                dev.raise_if_down(pynvml.NVMLError(status))
        answered = len(values)
        if answered < len(self.ids):  # a short answer: the rest unread
            values.extend([None] * (len(self.ids) - answered))
        answers = FieldAnswers(values, self.spans)
        if not self.undecided:
            return answers, self
        return answers, self._decided(self._decide(failed, answered))

    def _decide(self, failed: Mapping[int, int], answered: int) -> dict[str, str]:
        """The undecided families' modes from their entries' statuses: "call" when every
        entry said there is no such field, "field" when one answered; a family whose
        entries failed otherwise stays undecided."""
        success = pynvml.NVML_SUCCESS
        decided = {}
        for family in self.undecided:
            start, length = self.spans[family]
            statuses = [
                failed.get(i, success) if i < answered else _UNANSWERED
                for i in range(start, start + length)
            ]
            if all(status in _NO_FIELD for status in statuses):
                decided[family] = CALL_MODE
            elif success in statuses:
                decided[family] = FIELD_MODE
        return decided

    def _decided(self, decided: Mapping[str, str]) -> GpuPlan:
        return _build(self.links, {**self.modes, **decided}) if decided else self


def new_plan() -> GpuPlan:
    """A GPU's plan before anything is known: the GPU-wide families, no links."""
    return _build((), {})


def _build(links: tuple[Link, ...], modes: Mapping[str, str]) -> GpuPlan:
    families: dict[str, FieldIds | None] = {**GPU_FIELDS, **field_families(links)}
    decided = dict(modes)
    for family, family_ids in families.items():
        if family_ids is None:  # no field form: the call from the start
            decided[family] = CALL_MODE
    by_call = frozenset(family for family, mode in decided.items() if mode == CALL_MODE)
    ids: list[tuple[int, int]] = []
    spans: dict[str, tuple[int, int]] = {}
    for family, family_ids in families.items():
        if family_ids is not None and family not in by_call:
            spans[family] = (len(ids), len(family_ids))
            ids.extend(family_ids)
    return GpuPlan(
        links=links,
        modes=MappingProxyType(decided),
        ids=tuple(ids),
        request=pack_request(ids),
        spans=spans,
        undecided=tuple(family for family in spans if family not in decided),
        call_families=by_call,
        nvlinks=link_plans(links, by_call.__contains__),
    )
