"""One reading of Slurm for one decision: nodes, jobs and reservations at one moment, and
what follows from them (the nodes in service, which nodes a job may use, those reserved, when
each busy node is expected to drain, the nodes pending jobs named). The wrapper
(``arnold-sbatch``) and the admin loop (``arnold reserve sync``) both decide from it, as
Kueue's scheduler and its preemption both read one cache snapshot per cycle."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from reservations.policy import expected_end
from site_config import SiteConfig
from slurm_arnold.errors import ArnoldError, InfeasibleError
from slurm_arnold.slurm import JobInfo, Reservation, Slurm
from slurm_arnold.snapshot.live import live_cluster
from slurm_arnold.snapshot.queue import (
    ALIVE,
    OUT_OF_SERVICE,
    WAITING_FOR_NODES,
    lpj_of,
    queue_order,
    reservation_name,
)
from slurm_arnold.snapshot.view import ClusterView, hostlist_text, narrow_free


class Predictions(Protocol):
    """Run-time predictions of live jobs (``predictor.live.LivePredictor``)."""

    @property
    def name(self) -> str:
        """What the predictions are (``model_q`` or ``requested``)."""

    def predict(self, job: JobInfo) -> tuple[float, float]:
        """(point, upper) predicted run time of ``job`` in seconds."""


@dataclass
class Snapshot:
    """One reading of Slurm: nodes, jobs, reservations, and what follows from them."""

    now: float
    view: ClusterView
    jobs: dict[int, JobInfo]
    reservations: dict[str, Reservation]
    gpus_per_node: int
    busy: dict[str, set[int]] = field(default_factory=dict)  # node -> running jobs on it

    @classmethod
    def read(cls, slurm: Slurm, config: SiteConfig, partition: str | None = None, *,
             finished: bool = False) -> Snapshot:
        """Read the cluster now (``partition``: the one its usable nodes are of, default the
        site's). Jobs that have finished are left out unless ``finished``: slurmctld keeps
        them for ``MinJobAge`` (5 minutes by default), and a busy site's are most of the
        queue's bytes; no decision needs them."""
        reservations = slurm.reservations()
        view = live_cluster(slurm, minipod_level=config.minipod_level,
                            partition=partition or config.partition, reservations=reservations)
        jobs = slurm.jobs(detail=True) if finished else slurm.jobs(unfinished=True, detail=True)
        return cls.of(view, jobs, reservations)

    @classmethod
    def of(cls, view: ClusterView, jobs: Iterable[JobInfo],
           reservations: Iterable[Reservation]) -> Snapshot:
        """A snapshot of what a caller has read already (arnold-sbatch, under the site lock,
        reads each document once: the queue of a busy site costs seconds to read)."""
        by_id = {j.job_id: j for j in jobs}
        busy: dict[str, set[int]] = {}
        for j in by_id.values():
            if j.state in ("RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"):
                for n in j.nodes:
                    busy.setdefault(n, set()).add(j.job_id)
        g = view.common_gpus(view.topology.nodes) if view.nodes else 8
        return cls(time.time(), view, by_id, {r.name: r for r in reservations}, g, busy)

    def usable(self, partition: str | None = None) -> list[str]:
        """Nodes of the partition (default: the snapshot's), in tree order, that are up (busy
        or not)."""
        part = partition or self.view.partition
        return [n for n in self.view.topology.nodes if n in self.view.nodes
                and not self.view.nodes[n].flags & OUT_OF_SERVICE
                and self.view.nodes[n].state not in ("DOWN", "FUTURE", "UNKNOWN")
                and (part is None or part in self.view.nodes[n].partitions)]

    def allowed(self, job: JobInfo) -> set[str]:
        """Nodes in service that ``job`` may run on at all: in its partition (any of them,
        for a job submitted to several), outside its ``-x``, matching its ``-C``.
        :class:`InfeasibleError` for a constraint richer than ``a``, ``a&b``, ``a|b``."""
        partitions: list[str | None] = [p for p in job.partition.split(",") if p] or [None]
        usable = {n for p in partitions for n in self.usable(p)}
        narrowing = {"exclude": hostlist_text(job.excluded_nodes)} if job.excluded_nodes else {}
        if job.features:
            narrowing["constraint"] = job.features
        try:
            return narrow_free(ClusterView(self.view.topology, self.view.nodes, usable,
                                           self.view.partition), narrowing, set())
        except ArnoldError as exc:
            raise InfeasibleError(f"job {job.job_id}: {exc}; not reserved") from None

    def reserved(self, but: str | None = None) -> set[str]:
        """Nodes in any reservation (ours or an admin's), except ``but``."""
        return {n for r in self.reservations.values() if r.name != but for n in r.nodes}

    def drain(self, predictor: Predictions, *, leave_out: Iterable[int] = ()) -> dict[str,
                                                                                       float]:
        """Each busy node's predicted drain time (idle nodes are absent: drained now)."""
        skip = set(leave_out)
        out: dict[str, float] = {}
        for j in self.jobs.values():
            if j.job_id in skip or not j.nodes or j.state not in ALIVE or j.state == "PENDING":
                continue
            _, upper = predictor.predict(j)
            limit = j.time_limit_min * 60 if j.time_limit_min else math.inf
            start = float(j.start_time or self.now)
            end = expected_end(start, upper, limit, self.now)
            for n in j.nodes:
                out[n] = max(out.get(n, self.now), end)
        return out

    def after_our_lpjs(self, predictor: Predictions) -> dict[str, float]:
        """Nodes of our reservations, and when their LPJ is expected to end: its (expected)
        start plus its time limit; now for one whose LPJ has ended (the next ``sync``
        deletes it)."""
        drain = self.drain(predictor)
        out: dict[str, float] = {}
        for res in self.reservations.values():
            if lpj_of(res.name) is None:
                continue
            lpj = self.jobs.get(lpj_of(res.name) or -1)
            if lpj is None or lpj.state not in ALIVE:
                out.update({n: self.now for n in res.nodes})
                continue
            start = float(lpj.start_time or self.now) if lpj.state != "PENDING" else max(
                [self.now, *(drain.get(n, self.now) for n in res.nodes)])
            end = start + (lpj.time_limit_min * 60 if lpj.time_limit_min else math.inf)
            out.update({n: end for n in res.nodes})
        return out

    def is_lpj(self, job: JobInfo, config: SiteConfig) -> bool:
        """A job large enough to be reserved for."""
        return job.gpus >= config.reservation.large_job_gpus

    def named_nodes(self, drain: dict[str, float], jobs: Iterable[JobInfo]) -> dict[str, float]:
        """The nodes ``jobs`` asked for by name, each with when the last of them is expected
        to end there (its nodes' drain, ``drain``, plus its limit)."""
        out: dict[str, float] = {}
        for job in jobs:
            start = max([self.now, *(drain.get(n, self.now) for n in job.required_nodes)])
            end = start + (job.time_limit_min * 60 if job.time_limit_min else math.inf)
            for n in job.required_nodes:
                out[n] = max(out.get(n, self.now), end)
        return out

    def naming_jobs(self, *, own: str | None = None,
                    ahead_of: JobInfo | None = None) -> list[JobInfo]:
        """Pending jobs that asked for nodes by name (``-w``), in queue order; never the job
        whose reservation is ``own``. Given ``ahead_of``, only those ahead of it in the queue
        that wait for nodes alone (a held job, or one waiting on a dependency, keeps no nodes
        from it)."""
        out = []
        for job in self.jobs.values():
            if job.state != "PENDING" or not job.required_nodes \
                    or reservation_name(job.job_id) == own:
                continue
            if ahead_of is not None and (queue_order(job) >= queue_order(ahead_of)
                                         or job.held or job.reason not in WAITING_FOR_NODES):
                continue
            out.append(job)
        return sorted(out, key=queue_order)
