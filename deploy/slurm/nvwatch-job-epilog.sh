#!/bin/sh
# slurmctld epilog (slurm.conf: EpilogSlurmctld=/etc/slurm/nvwatch-job-epilog.sh): at each
# job's end, `nvwatch job --store` summarises it from Prometheus and keeps the summary
# where Slurm keeps the job: its AdminComment (read back with sacct once Prometheus has
# forgotten the job), or a directory on a site without slurmdbd.
#
# It runs in slurmctld's path for every job, as SlurmUser, with slurmctld's own short
# environment (SLURM_JOB_ID and friends, not the site's): what it needs comes from an
# environment file. It never fails the job's end: whatever happens it exits 0 and says
# why in one line to syslog (logger) and stderr.
#
# /etc/default/nvwatch-job (NVWATCH_JOB_ENV names another file):
#   NVWATCH_PROMETHEUS_URL=http://127.0.0.1:9090   the Prometheus the agents report to
#   NVWATCH_JOB_STORE=slurm                        or dir:/var/lib/nvwatch/jobs
#   NVWATCH=/usr/bin/nvwatch                       the command, if not on PATH
#   NVWATCH_JOB_TIMEOUT=30                         seconds before it gives up (a summary
#                                                  takes ~2 s; slurmdbd may take 10 s to
#                                                  record the job it is kept with)
#   NVWATCH_CLUSTER=c1                             this cluster's `cluster` label, where
#                                                  one Prometheus holds several clusters
ENV_FILE=${NVWATCH_JOB_ENV:-/etc/default/nvwatch-job}
# shellcheck disable=SC1090
# exported: nvwatch runs sacct, sacctmgr and squeue, which need SLURM_CONF where it is not
# the default
set -a
[ -r "$ENV_FILE" ] && . "$ENV_FILE"
set +a

say() {
    logger -t nvwatch-job-epilog "$1" 2>/dev/null || true
    echo "nvwatch-job-epilog: $1" >&2
}

[ -n "${SLURM_JOB_ID:-}" ] || { say "no SLURM_JOB_ID: not run by slurmctld"; exit 0; }
[ -n "${NVWATCH_PROMETHEUS_URL:-}" ] || { say "job $SLURM_JOB_ID: no NVWATCH_PROMETHEUS_URL in $ENV_FILE"; exit 0; }

# bounded: slurmctld waits for its epilogs, and a Prometheus that hangs must not hold it
# (unquoted on purpose: no cluster is no argument at all)
if ! out=$(timeout "${NVWATCH_JOB_TIMEOUT:-30}" "${NVWATCH:-nvwatch}" job "$SLURM_JOB_ID" \
        --prometheus "$NVWATCH_PROMETHEUS_URL" --store --partition "${SLURM_JOB_PARTITION:-}" \
        ${NVWATCH_CLUSTER:+--cluster "$NVWATCH_CLUSTER"} \
        --job-store "${NVWATCH_JOB_STORE:-slurm}" 2>&1); then
    say "job $SLURM_JOB_ID: no summary kept: $(printf '%s' "$out" | tail -n 1)"
fi
exit 0
