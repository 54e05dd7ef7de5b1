#!/bin/sh
# Slurm HealthCheckProgram (slurm.conf: HealthCheckProgram=/etc/slurm/nvwatch-healthcheck.sh
# and e.g. HealthCheckInterval=300): drain this node while `nvwatch doctor` finds a source
# down (NVML failing with GPUs on the PCI bus, HCAs without their RDMA devices), and
# resume it once doctor passes again, if it was this script that drained it.
#
# slurmd runs it as root, at start-up and every HealthCheckInterval; it acts through
# scontrol itself (slurmd ignores the exit code). doctor reads the same flags, NVWATCH_*
# environment and config file as the agent: set them here (NVWATCH_CONFIG=...) when the
# agent is configured. An exit code of 2 means doctor itself was misconfigured: that is
# reported on stderr and leaves the node as it is.
set -u

NVWATCH=${NVWATCH:-/opt/nvwatch/bin/nvwatch}
SCONTROL=${SCONTROL:-scontrol}
NODE=${SLURMD_NODENAME:-$(hostname -s)}
TAG="nvwatch:"

findings=$("$NVWATCH" doctor 2>&1)
status=$?

case $status in
  0)
    # resume only a drain of ours: another tool's (or an admin's) reason stays
    if "$SCONTROL" show node "$NODE" 2>/dev/null | grep -q "Reason=$TAG"; then
      "$SCONTROL" update NodeName="$NODE" State=RESUME
    fi
    ;;
  1)
    # the first source down (or that nothing is collected), on one short line
    reason=$(printf '%s\n' "$findings" | awk '$2 == "down" { $2 = "down:"; print; exit }')
    [ -n "$reason" ] || reason=$(printf '%s\n' "$findings" | tail -n 1)
    reason=$(printf '%s' "$reason" | tr -s ' ' | tr -d '"' | cut -c 1-180)
    "$SCONTROL" update NodeName="$NODE" State=DRAIN Reason="$TAG $reason"
    ;;
  *)
    printf 'nvwatch-healthcheck: doctor failed (exit %s): %s\n' "$status" "$findings" >&2
    ;;
esac
exit 0
