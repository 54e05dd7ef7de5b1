"""Where a job's summary outlives Prometheus: Slurm's AdminComment, or a directory.

`--job-store slurm` writes the encoded summary into the job's AdminComment in the
accounting database with `sacctmgr update job` (as jobstats does: slurmctld's epilog runs
as SlurmUser, which may; `scontrol update` refuses a job that has finished) and reads it
back with `sacct`, so it lasts as long as the site's accounting does. A site without
slurmdbd names a directory instead: one JSON file per job. Its queue wait comes from
slurmctld itself (`scontrol show job`, where Slurm's configuration is found), which keeps
a finished job for MinJobAge (5 minutes by default), long enough for the epilog that
stores the summary.

Neither store overwrites what another tool wrote: an AdminComment that holds anything
but an nvwatch summary (jobstats' `JS1:` among them) is left alone, with one line saying
so.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from nvwatch.report.jobs.codec import StoreError, decode, encode_within, is_jobstats, is_ours

SLURM = "slurm"
COMMAND_TIMEOUT_S = 30.0
DEFAULT_SLURM_CONF = Path("/etc/slurm/slurm.conf")
# slurmctld hands a finished job's record to slurmdbd a moment after its epilog starts
RECORD_WAIT_S = 10.0
# a job id as Slurm prints one: 1234, an array task 1234_7, a het component 1234+1
_JOB_ID = re.compile(r"^\d+(?:_\d+|\+\d+)?$")


class JobNotStored(StoreError):
    """The store holds nothing for the job (or the job is not one it can hold yet)."""


@dataclass(frozen=True)
class Wanted:
    """Which stored jobs `nvwatch jobs` lists: ended since `since` (Unix seconds)."""

    since: float
    user: str | None = None
    account: str | None = None
    partition: str | None = None

    def matches(self, summary: dict[str, Any]) -> bool:
        return (
            float(summary.get("end", 0.0)) >= self.since
            and self.user in (None, summary.get("user"))
            and self.account in (None, summary.get("account"))
            and self.partition in (None, summary.get("partition"))
        )


class JobStore(Protocol):
    @property
    def description(self) -> str: ...

    def put(self, job_id: str, summary: dict[str, Any]) -> None: ...

    def get(self, job_id: str) -> dict[str, Any]: ...

    def queue_wait(self, job_id: str, *, wait_for_record: bool) -> float | None: ...

    def select(self, wanted: Wanted) -> list[dict[str, Any]]: ...


def check_job_id(job_id: str) -> str:
    if not _JOB_ID.match(job_id):
        raise StoreError(f"{job_id!r} is not a Slurm job id (digits, 12_3 or 12+1)")
    return job_id


def open_store(spec: str) -> JobStore:
    """`slurm`, or a directory (`dir:PATH` or a path)."""
    if spec == SLURM:
        return SlurmStore()
    path = spec.removeprefix("dir:")
    if not path:
        raise StoreError("--job-store: name `slurm` or a directory")
    return DirectoryStore(Path(path))


@dataclass
class DirectoryStore:
    root: Path

    @property
    def description(self) -> str:
        return f"job store {self.root}"

    def _file(self, job_id: str) -> Path:
        return self.root / f"{check_job_id(job_id)}.json"

    def put(self, job_id: str, summary: dict[str, Any]) -> None:
        target = self._file(job_id)
        try:
            text = json.dumps(summary, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError) as err:
            raise StoreError(f"job {job_id}'s summary is not JSON: {err}") from None
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            # a reader never sees half a file: written aside, then renamed over
            fd, name = tempfile.mkstemp(dir=self.root, prefix=f".{job_id}.", suffix=".tmp")
        except OSError as err:
            raise StoreError(f"cannot write {target}: {err.strerror or err}") from None
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
                # on disk before the rename: a crash then leaves the old file or the new
                # one, never an empty one under the job's name
                out.flush()
                os.fsync(out.fileno())
            os.chmod(name, 0o644)  # mkstemp's 0600 would hide it from `nvwatch job` users
            os.replace(name, target)
        except OSError as err:
            Path(name).unlink(missing_ok=True)
            raise StoreError(f"cannot write {target}: {err.strerror or err}") from None

    def get(self, job_id: str) -> dict[str, Any]:
        path = self._file(job_id)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise JobNotStored(f"job {job_id} is not in the {self.description}") from None
        except (OSError, ValueError) as err:
            raise StoreError(f"cannot read {path}: {err}") from None
        if not isinstance(data, dict):
            raise StoreError(f"{path} does not hold a job summary")
        return data

    def queue_wait(self, job_id: str, *, wait_for_record: bool) -> float | None:
        """Seconds from the job's submission to its start as slurmctld still has them;
        None where it does not (no Slurm configured here, or the job is past MinJobAge)."""
        argv = ["scontrol", "-o", "show", "job", check_job_id(job_id)]
        if not slurm_configured():
            return None
        try:
            out = _run(argv, {"SLURM_TIME_FORMAT": "%s"})
        except StoreError:  # not a Slurm site, or a job slurmctld has forgotten
            return None
        return scontrol_queue_wait(out)

    def select(self, wanted: Wanted) -> list[dict[str, Any]]:
        found = []
        for path in sorted(self.root.glob("*.json")) if self.root.is_dir() else ():
            try:
                data = self.get(path.stem)
            except StoreError:  # a file that is not ours, or half a name: not a job
                continue
            if wanted.matches(data):
                found.append(data)
        return found


@dataclass
class SlurmStore:
    description: str = "Slurm AdminComment (sacct)"

    def put(self, job_id: str, summary: dict[str, Any]) -> None:
        current = self._recorded_comment(check_job_id(job_id))
        if current and not is_ours(current):
            owner = "jobstats (JS1:)" if is_jobstats(current) else "another tool"
            raise StoreError(
                f"job {job_id}'s AdminComment already holds {owner}'s text: left as it is"
            )
        text = encode_within(summary)
        out = _run(
            ["sacctmgr", "-i", "update", "job", "where", f"jobid={job_id}", "set",
             f"AdminComment={text}"]
        )  # fmt: skip
        if "Nothing modified" in out:
            raise StoreError(f"sacctmgr modified no record of job {job_id}")

    def queue_wait(self, job_id: str, *, wait_for_record: bool) -> float | None:
        """Seconds from the job's submission to its start, as sacct has them (once
        slurmdbd has its record, waited for within bounds); None for a job that never
        started or that sacct does not list."""
        check_job_id(job_id)
        if wait_for_record:
            self._recorded_comment(job_id)
        argv = ["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "JobID,Submit,Start"]
        # Unix seconds rather than the site's local time format
        out = _run(argv, {"SLURM_TIME_FORMAT": "%s"})
        for line in out.splitlines():
            fields = line.split("|")
            if len(fields) == 3 and fields[0] == job_id:
                submit, start = fields[1].strip(), fields[2].strip()
                if submit.isdigit() and start.isdigit():
                    return max(0.0, float(int(start) - int(submit)))
        return None

    def select(self, wanted: Wanted) -> list[dict[str, Any]]:
        """Every job sacct lists as ended in the period with an nvwatch summary (other
        AdminComments, jobstats' among them, are not ours to read)."""
        start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(wanted.since))
        argv = ["sacct", "-X", "-n", "-P", "-S", start, "-E", "now"]
        argv += ["-o", "JobID,Partition,AdminComment"]
        argv += ["--allusers"] if wanted.user is None else ["-u", wanted.user]
        argv += [] if wanted.account is None else ["-A", wanted.account]
        argv += [] if wanted.partition is None else ["-r", wanted.partition]
        found = []
        for line in _run(argv).splitlines():
            fields = line.split("|", 2)
            if len(fields) != 3 or not is_ours(fields[2]):
                continue
            try:
                data = {**decode(fields[2]), "partition": fields[1]}
            except StoreError:
                continue
            if wanted.matches(data):
                found.append(data)
        return found

    def _recorded_comment(self, job_id: str) -> str:
        """The AdminComment once slurmdbd has the job's record (bounded wait)."""
        deadline = time.monotonic() + RECORD_WAIT_S
        while True:
            try:
                return self._admin_comment(job_id)
            except JobNotStored:
                if time.monotonic() >= deadline:
                    raise
            time.sleep(1.0)

    def get(self, job_id: str) -> dict[str, Any]:
        comment = self._admin_comment(check_job_id(job_id))
        if not comment:
            raise JobNotStored(f"job {job_id} has no nvwatch summary in its AdminComment")
        return decode(comment)

    def _admin_comment(self, job_id: str) -> str:
        out = _run(["sacct", "-j", job_id, "-X", "-n", "-P", "-o", "JobID,State,AdminComment"])
        rows = [line.split("|", 2) for line in out.splitlines() if line.strip()]
        rows = [r for r in rows if len(r) == 3 and r[0] == job_id]
        if not rows and _queue_state(job_id) == "PENDING":
            # slurmctld tells slurmdbd of a pending job a while after it is queued
            raise JobNotStored(f"job {job_id} is still pending: nothing to summarise yet")
        if not rows:
            raise JobNotStored(
                f"job {job_id} is not in Slurm's accounting: older than its retention, or never ran"
            )
        _, state, comment = rows[-1]
        if state.split()[:1] == ["PENDING"]:
            raise JobNotStored(f"job {job_id} is still pending: nothing to summarise yet")
        return comment.strip()


def slurm_configured() -> bool:
    """Whether Slurm's configuration is here: SLURM_CONF, or the file at its default
    path, as on the controller whose epilog stores summaries. Without either, Slurm's
    commands run configless and ask DNS for a controller: not a question to send off
    this machine for a job's queue wait."""
    return bool(os.environ.get("SLURM_CONF")) or DEFAULT_SLURM_CONF.is_file()


def scontrol_queue_wait(out: str) -> float | None:
    """Start less submit time of `scontrol -o show job` output in Unix seconds; None for
    a job that has not started (StartTime is then a forecast, or Unknown)."""
    fields = dict(re.findall(r"(\w+)=(\S*)", out.splitlines()[0] if out.strip() else ""))
    submit, start, state = (
        fields.get("SubmitTime", ""),
        fields.get("StartTime", ""),
        fields.get("JobState", ""),
    )
    if state == "PENDING" or not (submit.isdigit() and start.isdigit()):
        return None
    return max(0.0, float(int(start) - int(submit)))


def _queue_state(job_id: str) -> str:
    """The job's state as slurmctld has it, "" when it does not know the job."""
    try:
        return _run(["squeue", "-h", "-j", job_id, "-o", "%T"]).strip()
    except StoreError:  # an id slurmctld has forgotten is an error to squeue
        return ""


def _run(argv: list[str], env: dict[str, str] | None = None) -> str:
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            env=None if env is None else {**os.environ, **env},
        )
    except FileNotFoundError:
        raise StoreError(
            f"{argv[0]} is not on PATH: the Slurm store needs Slurm's commands"
        ) from None
    except subprocess.TimeoutExpired:
        raise StoreError(f"{argv[0]} did not answer in {COMMAND_TIMEOUT_S:g}s") from None
    if done.returncode != 0:
        message = (done.stderr.strip() or done.stdout.strip()).splitlines()
        raise StoreError(f"{argv[0]} failed: {message[-1] if message else done.returncode}")
    return done.stdout
