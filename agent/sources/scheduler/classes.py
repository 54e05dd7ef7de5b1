"""Slurm's reasons, in the few classes the scheduler series carry as labels.

A pending job's `Reason` (squeue's %r, `state_reason` in its JSON) is one of about 150
names, and grows with each release; a node's reason is free text an operator or a health
check wrote. Labels need a small fixed set, so both are classed here, and anything not
recognised falls in `other` rather than becoming a new label value.
"""

from __future__ import annotations

from collections.abc import Collection

# Why GPUs a job asked for are not yet its: the order is the order of the series.
PENDING_CLASSES = ("resources", "priority", "limits", "dependency", "held", "other")

# Waiting for nodes, GPUs or other things the cluster lacks right now (a down or drained
# node the job needs is capacity the cluster lacks).
_RESOURCES = frozenset(
    {
        "Resources",
        "NodeDown",
        "Licenses",
        "BurstBufferResources",
        "PowerNotAvail",
        "PowerReserved",
    }
)
# Limits an account, QOS, partition or array puts on the job, not the cluster's size.
_LIMITS = frozenset(
    {
        "JobArrayTaskLimit",
        "AccountingPolicy",
        "MaxMemPerLimit",
        "PartitionNodeLimit",
        "PartitionTimeLimit",
    }
)
_LIMIT_PREFIXES = ("Assoc", "QOSGrp", "QOSMax", "QOSMin", "QOSJobLimit", "QOSResourceLimit")
_DEPENDENCY = frozenset({"Dependency", "DependencyNeverSatisfied"})


def pending_class(reason: str) -> str:
    """The class of a pending job's Slurm reason ('AssocGrpGRES' -> 'limits')."""
    # "ReqNodeNotAvail, UnavailableNodes:gpu[01-02]": the name is before the comma; squeue
    # writes some reasons with spaces ("Nodes required for job are DOWN, ...")
    name = reason.split(",", 1)[0].strip().replace(" ", "_")
    if name == "Priority":
        return "priority"
    if name in _RESOURCES or name.startswith(("ReqNodeNotAvail", "Nodes_required")):
        return "resources"
    if name in _DEPENDENCY:
        return "dependency"
    # JobHeldUser, JobHeldAdmin, "launch failed requeued held", JobHoldMaxRequeue
    if name.startswith(("JobHeld", "JobHold")) or name.endswith("_held"):
        return "held"
    if name in _LIMITS or name.startswith(_LIMIT_PREFIXES):
        return "limits"
    return "other"


# Why a node's GPUs cannot take jobs, most specific first. The machine-made reasons come
# from Slurm itself; `drained` and `down` are an operator's (or a health check's) own
# words, which are free text and so stay out of the label.
NODE_CLASSES = (
    "not_responding",
    "kill_task_failed",
    "prolog_epilog",
    "config_mismatch",
    "reboot",
    "failing",
    "reserved",
    "drained",
    "down",
    "other",
)

# Slurm's own reason texts (slurmctld writes them when it drains or downs a node)
_REASON_PREFIXES = (
    ("not responding", "not_responding"),
    ("kill task failed", "kill_task_failed"),
    ("prolog error", "prolog_epilog"),
    ("epilog error", "prolog_epilog"),
    ("prolog failed", "prolog_epilog"),
    ("epilog failed", "prolog_epilog"),
    ("low realmemory", "config_mismatch"),
    ("low socket", "config_mismatch"),
    ("low tmpdisk", "config_mismatch"),
    ("gres/", "config_mismatch"),
    ("reboot", "reboot"),
)
# node state words (base states and flags, upper case) that take its GPUs out of service
_DOWN = frozenset({"DOWN"})
_DRAINED = frozenset({"DRAIN", "DRAINED", "DRAINING"})
_NOT_RESPONDING = frozenset({"NOT_RESPONDING"})
_FAILING = frozenset({"FAIL", "FAILING", "ERROR"})
_REBOOT = frozenset({"REBOOT_REQUESTED", "REBOOT_ISSUED", "REBOOT"})
_RESERVED = frozenset({"RESERVED", "MAINTENANCE", "MAINT"})
_OTHER = frozenset({"FUTURE", "UNKNOWN", "INVALID", "INVALID_REG"})
_OUT = _DOWN | _DRAINED | _NOT_RESPONDING | _FAILING | _REBOOT | _RESERVED | _OTHER


def node_class(states: Collection[str], reason: str) -> str | None:
    """Why a node is unavailable, or None when its GPUs can take jobs. `states`: its base
    state and flags in upper case ({'MIXED', 'DRAIN'}); `reason`: Slurm's reason text."""
    if not _OUT.intersection(states):
        return None
    text = reason.strip().lower()
    for prefix, cls in _REASON_PREFIXES:
        if text.startswith(prefix):
            return cls
    for words, cls in (
        (_NOT_RESPONDING, "not_responding"),
        (_FAILING, "failing"),
        (_REBOOT, "reboot"),
        (_DOWN, "down"),
        (_DRAINED, "drained"),
        (_RESERVED, "reserved"),
    ):
        if words.intersection(states):
            return cls
    return "other"
