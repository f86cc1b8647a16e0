"""Jobs of a replayed log, as the simulator sees them."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from predictor.swf import JobRecord
from reservations.policy import lpj_layout
from slurm_arnold.errors import ArnoldError


@dataclass(eq=False)
class SimJob:
    """One job: what the log says, and what the simulation does to it."""

    index: int
    record: JobRecord
    submit: float
    runtime: float  # the log's run time, cut at the time limit (Slurm enforces limits)
    limit: float  # the user's time limit (s)
    gpus: int
    nodes: int  # whole nodes (0 for a job smaller than a node)
    lpj: bool
    start: float | None = None
    end: float | None = None
    node_ids: list[int] = field(default_factory=list)
    gpus_each: int = 0
    killed: bool = False
    admitted_to: int | None = None  # the reservation it was admitted into
    weighted_spread: float | None = None
    predicted: float | None = None  # the predictor's run time when the job started
    first_plan: float | None = None  # an LPJ's start in the first backfill plan made for it

    @property
    def user(self) -> str:
        """The job's user."""
        return self.record.user

    def layout(self) -> tuple[int, int]:
        """PP and DP of an LPJ on ``nodes`` nodes with TP = g (``policy.lpj_layout``)."""
        return lpj_layout(self.nodes)


@dataclass
class Workload:
    """The jobs to replay and what was left out."""

    jobs: list[SimJob]
    dropped_too_large: int
    dropped_unusable: int


def build_workload(records: Sequence[JobRecord], *, gpus_per_node: int, gpus_per_proc: float,
                   cluster_gpus: int, lpj_gpus: int) -> Workload:
    """Turn log records into jobs: GPUs = processors x ``gpus_per_proc`` (at least 1); jobs of
    fewer than g GPUs share nodes, larger ones take whole nodes; jobs larger than the cluster,
    or without a run time or time limit, are dropped and counted."""
    jobs: list[SimJob] = []
    too_large = unusable = 0
    for rec in sorted(records, key=lambda r: (r.submit, r.job_id)):
        procs = rec.procs or rec.gpus or 0
        run = (rec.end - rec.start) if rec.start is not None and rec.end is not None else None
        if procs <= 0 or run is None or run < 0 or not rec.time_limit or rec.time_limit <= 0:
            unusable += 1
            continue
        gpus = max(1, math.ceil(procs * gpus_per_proc - 1e-9)) if rec.gpus is None \
            else rec.gpus
        if gpus > cluster_gpus:
            too_large += 1
            continue
        nodes = 0 if gpus < gpus_per_node else math.ceil(gpus / gpus_per_node)
        limit = float(rec.time_limit)
        jobs.append(SimJob(len(jobs), rec, float(rec.submit), min(float(run), limit), limit,
                           gpus, nodes, nodes > 0 and gpus >= lpj_gpus))
    return Workload(jobs, too_large, unusable)


#: The columns of ``arnold sim --jobs-csv``: times in the log's seconds (its submit clock).
JOB_COLUMNS = ("job_id", "user", "submit", "start", "end", "wait_h", "nodes", "gpus", "lpj",
               "killed", "admitted", "weighted_spread")


def open_jobs_csv(path: Path) -> TextIO:
    """Open ``arnold sim --jobs-csv``'s file before the replay, so a path that cannot be
    written fails at once rather than after a long run."""
    try:
        return path.open("w", newline="")
    except OSError as exc:
        raise ArnoldError(f"cannot write {path}: {exc.strerror}; pass --jobs-csv a writable "
                          "file") from exc


def write_jobs_csv(out: TextIO, jobs: Sequence[SimJob]) -> None:
    """Write each replayed job's fate, one row per job in submit order (``JOB_COLUMNS``):
    who waited how long is what the run's means hide."""
    writer = csv.writer(out)
    writer.writerow(JOB_COLUMNS)
    for job in jobs:
        waited = None if job.start is None else (job.start - job.submit) / 3600.0
        writer.writerow((
            job.record.job_id, job.user, f"{job.submit:.0f}",
            "" if job.start is None else f"{job.start:.0f}",
            "" if job.end is None else f"{job.end:.0f}",
            "" if waited is None else f"{waited:.4f}", job.nodes, job.gpus,
            int(job.lpj), int(job.killed), int(job.admitted_to is not None),
            "" if job.weighted_spread is None else f"{job.weighted_spread:.4f}"))
