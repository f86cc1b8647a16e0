"""Slurm's queue as both the wrapper and the admin loop read it: which jobs are alive or
finished, where a job stands in the queue, which nodes the queue already holds, and which
reservations are ours (``arnold_<LPJ job id>``)."""

from __future__ import annotations

from collections.abc import Iterable

from slurm_arnold.slurm import UNAVAILABLE_FLAGS, JobInfo

#: The prefix of our reservations' names; the rest is the LPJ's job id.
PREFIX = "arnold_"
#: Job states of a job still in the queue (pending or holding nodes).
ALIVE = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED",
         "RESIZING")
FINISHED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
            "BOOT_FAIL", "DEADLINE", "PREEMPTED", "SPECIAL_EXIT"}
#: Flags that take a node out of service (not merely busy: COMPLETING and PLANNED nodes drain
#: like any other).
OUT_OF_SERVICE = UNAVAILABLE_FLAGS - {"COMPLETING", "PLANNED"}
#: Reasons a pending job may be waiting only for nodes (others: held, dependency, limits...).
WAITING_FOR_NODES = ("Resources", "Priority", "None", "ReqNodeNotAvail", "Reservation")


def reservation_name(job_id: int) -> str:
    """Our reservation's name for an LPJ."""
    return f"{PREFIX}{job_id}"


def lpj_of(name: str) -> int | None:
    """The LPJ job id of one of our reservations (``None`` for anyone else's)."""
    rest = name.removeprefix(PREFIX)
    return int(rest) if name.startswith(PREFIX) and rest.isdigit() else None


def queue_order(job: JobInfo) -> tuple[int, int, int]:
    """Where ``job`` stands in Slurm's queue: higher priority first, then earlier submits."""
    return (-job.priority, job.submit_time or 0, job.job_id)


def by_priority(jobs: Iterable[JobInfo]) -> list[JobInfo]:
    """``jobs`` in queue order (:func:`queue_order`)."""
    return sorted(jobs, key=queue_order)


def taken_by_queue(jobs: list[JobInfo]) -> set[str]:
    """Nodes other jobs hold or are about to: every unfinished job's allocated nodes and the
    required nodes (``-w``) of every pending job, whoever submitted it. A job that slurmctld
    has not started yet still leaves its nodes IDLE; it must not be given them twice."""
    taken: set[str] = set()
    for job in jobs:
        if job.state in FINISHED:
            continue
        taken.update(job.nodes)
        if job.state == "PENDING":
            taken.update(job.required_nodes)
    return taken
