#!/bin/sh
# Slurm HealthCheckProgram (slurm.conf: HealthCheckProgram=/etc/slurm/nvwatch-healthcheck.sh
# and e.g. HealthCheckInterval=300): drain this node once `nvwatch doctor` has found a
# source down (NVML failing with GPUs on the PCI bus, HCAs without their RDMA devices) in
# NVWATCH_HEALTHCHECK_FAILURES consecutive runs, and resume it once doctor passes again,
# if it was this script that drained it.
#
# One failed run is not enough: a driver reloading, a GPU reset or an HCA's firmware
# update make doctor fail for one run, and a drain for that costs a node's jobs a slot.
# With HealthCheckInterval=300 and the default of 3, a source down for 10 to 15 minutes
# drains the node. The count of failed runs in a row is kept in
#   ${NVWATCH_HEALTHCHECK_STATE_DIR:-${STATE_DIRECTORY:-/run/nvwatch}}/healthcheck-failures
# (/run: a reboot starts it again at 0); a pass removes it. A missing or garbled file
# counts as 0. Where the file cannot be written, the count is unknown and a failed run
# drains at once, as if NVWATCH_HEALTHCHECK_FAILURES were 1 (said on stderr): a broken
# node must not go unnoticed because /run is.
#
# slurmd runs it as root, at start-up and every HealthCheckInterval; it acts through
# scontrol itself (slurmd ignores the exit code). doctor reads the same flags, NVWATCH_*
# environment and config file as the agent: set them here (NVWATCH_CONFIG=...) when the
# agent is configured. An exit code of 2 means doctor itself was misconfigured: that is
# reported on stderr and leaves the node and the count as they are.
set -u

NVWATCH=${NVWATCH:-/opt/nvwatch/bin/nvwatch}
SCONTROL=${SCONTROL:-scontrol}
NODE=${SLURMD_NODENAME:-$(hostname -s)}
TAG="nvwatch:"
STATE_DIR=${NVWATCH_HEALTHCHECK_STATE_DIR:-${STATE_DIRECTORY:-/run/nvwatch}}
STATE="$STATE_DIR/healthcheck-failures"
FAILURES=${NVWATCH_HEALTHCHECK_FAILURES:-3}

warn() {
  printf 'nvwatch-healthcheck: %s\n' "$*" >&2
}

case $FAILURES in
  # digits only, no leading 0 (sh arithmetic reads 010 as octal, and 08 not at all)
  '' | *[!0-9]* | 0*)
    warn "NVWATCH_HEALTHCHECK_FAILURES=$FAILURES is not a count of runs (1 or more); using 3"
    FAILURES=3
    ;;
esac

findings=$("$NVWATCH" doctor 2>&1)
status=$?

case $status in
  0)
    rm -f "$STATE"
    # resume only a drain of ours: another tool's (or an admin's) reason stays
    if "$SCONTROL" show node "$NODE" 2>/dev/null | grep -q "Reason=$TAG"; then
      "$SCONTROL" update NodeName="$NODE" State=RESUME
    fi
    ;;
  1)
    # failed runs in a row so far: the file's one number, anything else counts as none
    count=0
    if [ -r "$STATE" ]; then
      read -r count <"$STATE" 2>/dev/null || count=0
      case $count in
        # garbled: not digits, a leading 0 (octal to sh), too long to be a count of ours
        '' | *[!0-9]* | 0?* | ?????*) count=0 ;;
      esac
    fi
    count=$((count + 1))
    # write whole or not at all: a run killed half-way leaves the old count, not half a one
    if ! { mkdir -p "$STATE_DIR" && printf '%s\n' "$count" >"$STATE.new" \
      && mv -f "$STATE.new" "$STATE"; } 2>/dev/null; then
      warn "cannot keep the failure count in $STATE: draining on this failure"
      count=$FAILURES
    fi
    # the first source down (or that nothing is collected), on one short line
    reason=$(printf '%s\n' "$findings" | awk '$2 == "down" { $2 = "down:"; print; exit }')
    [ -n "$reason" ] || reason=$(printf '%s\n' "$findings" | tail -n 1)
    reason=$(printf '%s' "$reason" | tr -s ' ' | tr -d '"' | cut -c 1-180)
    if [ "$count" -lt "$FAILURES" ]; then
      warn "doctor failed $count of $FAILURES runs in a row before a drain: $reason"
    elif shown=$("$SCONTROL" show node "$NODE" 2>/dev/null) \
      && printf '%s\n' "$shown" | grep -q "Reason=" \
      && ! printf '%s\n' "$shown" | grep -q "Reason=$TAG"; then
      # out of service for another reason (an admin's RMA): replacing it with ours would
      # let the next pass resume a node someone took out on purpose
      warn "not draining: the node is out for another reason; doctor: $reason"
    else
      "$SCONTROL" update NodeName="$NODE" State=DRAIN Reason="$TAG $reason"
    fi
    ;;
  *)
    warn "doctor failed (exit $status): $findings"
    ;;
esac
exit 0
