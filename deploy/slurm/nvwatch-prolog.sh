#!/bin/sh
# Slurm Prolog (slurm.conf: Prolog=/etc/slurm/nvwatch-prolog.sh): record which GPUs the
# job holds, for `nvwatch serve --attribution slurm --hpc-job-mapping-dir DIR`.
#
# The directory is dcgm-exporter's job-mapping format, so a site moving from dcgm-exporter
# keeps this pair and its --hpc-job-mapping-dir: one file per GPU, named by its NVML index,
# holding the ids of the jobs on it, one per line. The epilog removes the job's lines.
#
# slurmd runs it as root with SLURM_JOB_ID and, for jobs with --gres=gpu, SLURM_JOB_GPUS
# (the node's GPU indices, "0,3"); CUDA_VISIBLE_DEVICES is the fallback (in the prolog it
# holds the same node-level indices). A job without GPUs writes nothing.
set -eu

DIR=${NVWATCH_HPC_JOB_MAPPING_DIR:-/run/nvwatch/job-map}
GPUS=${SLURM_JOB_GPUS:-${CUDA_VISIBLE_DEVICES:-}}
[ -n "${SLURM_JOB_ID:-}" ] && [ -n "$GPUS" ] || exit 0

mkdir -p "$DIR"
chmod 755 "$DIR"
for gpu in $(echo "$GPUS" | tr ',' ' '); do
  case $gpu in
    *[!0-9.]* | '') continue ;;  # a UUID or garbage: not a file name the agent reads
  esac
  # one writer at a time per file: two jobs may share a GPU and start together
  (
    flock 9
    grep -qx "$SLURM_JOB_ID" "$DIR/$gpu" 2>/dev/null || echo "$SLURM_JOB_ID" >>"$DIR/$gpu"
  ) 9>>"$DIR/.lock"
done
exit 0
