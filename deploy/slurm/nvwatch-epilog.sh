#!/bin/sh
# Slurm Epilog (slurm.conf: Epilog=/etc/slurm/nvwatch-epilog.sh): remove the job from the
# job-mapping files nvwatch-prolog.sh wrote; a file left with no job is removed, so the
# GPU's nvwatch_gpu_allocation_info series ends with the job.
#
# It runs in the same environment as the prolog (SLURM_JOB_ID, SLURM_JOB_GPUS). Every
# file is checked, not only the job's GPUs: an epilog must clean up even when the GPU
# list is missing (a job cancelled during its prolog).
set -eu

DIR=${NVWATCH_HPC_JOB_MAPPING_DIR:-/run/nvwatch/job-map}
[ -n "${SLURM_JOB_ID:-}" ] && [ -d "$DIR" ] || exit 0

(
  flock 9
  for file in "$DIR"/*; do
    [ -f "$file" ] || continue
    case ${file##*/} in
      *[!0-9.]*) continue ;;
    esac
    grep -qx "$SLURM_JOB_ID" "$file" || continue
    grep -vx "$SLURM_JOB_ID" "$file" >"$file.tmp" || true
    if [ -s "$file.tmp" ]; then mv "$file.tmp" "$file"; else rm -f "$file" "$file.tmp"; fi
  done
) 9>>"$DIR/.lock"
exit 0
