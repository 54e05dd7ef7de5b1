"""The executive summary: three to six sentences with the numbers that matter and what to do.

Each sentence is a section's most important finding, in the order a capacity review
reads them: is the fleet used, is it short of GPUs for its queue (or are GPUs idle while
jobs wait), does the power plan hold, is anything overheating, is the fabric in the way,
is anything broken, which node holds other people's jobs back (the straggler section's
worst culprit: every job it touches runs at its pace), is the room or a node's fans or
supplies at fault, who holds GPUs idle. A section that found nothing worth a sentence
leaves room for the next; poor data coverage is always said. The power sentence plans on
the node power the BMCs measure where they are probed, and a GPU's slowdown names the
room, the node or the GPU as its cause, so the cooling section's own sentence comes
after the health one.
"""

from __future__ import annotations

import math

from nvwatch.report import units
from nvwatch.report.model import Section
from nvwatch.report.sections.cooling import QUIET as COOLING_QUIET

# six: the queue's verdict joined the five findings a review reads first (used, power,
# heat, fabric, broken) rather than pushing one of them out
MAX_SENTENCES = 6
# Below this share of expected samples the numbers may mislead: the summary says so.
POOR_COVERAGE = 0.9
# findings that say "nothing found": not worth a place in the summary
QUIET = ("No GPU slowed down for heat.", COOLING_QUIET)
ORDER = (
    "utilization",
    "demand",
    "power",
    "thermal",
    "fabric",
    "health",
    "stragglers",
    "jobs",
    "cooling",
    "usage",
)


def executive_summary(sections: list[Section], range_words: str) -> list[str]:
    by_key = {s.key: s for s in sections}
    candidates: list[str] = []
    for key in ORDER:
        section = by_key.get(key)
        if section is None or section.absent or not section.findings:
            continue
        finding = section.findings[0]
        if key == "utilization":
            finding = f"Over the last {range_words}, {_lower_first(finding)}"
        if finding not in QUIET:
            candidates.append(finding)
    # the idle nodes (utilization's second finding) matter once the rest is said
    utilization = by_key.get("utilization")
    if utilization is not None and len(utilization.findings) > 1:
        candidates.append(utilization.findings[1])
    poor = [
        f"{s.title.lower()} {units.percent(s.coverage)}"
        for s in sections
        if not math.isnan(s.coverage) and s.coverage < POOR_COVERAGE
    ]
    room = MAX_SENTENCES - (1 if poor else 0)
    sentences = candidates[:room]
    if poor:
        sentences.append("Read with care: data coverage was low for " + ", ".join(poor) + ".")
    if len(sentences) < 3:
        sentences.append("Nothing else needs action: the other sections found no problem.")
    return sentences


def _lower_first(text: str) -> str:
    """'The 16 GPUs ...' -> 'the 16 GPUs ...' (an acronym stays as it is)."""
    first_word = text.split(" ", 1)[0]
    return text if first_word.isupper() else text[:1].lower() + text[1:]
