"""Where an LPJ would be reserved, and why: the nodes it names, or the reservation policy's
choice on one snapshot, with Slurm's own estimate beside it (``arnold reserve plan``)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from predictor.live import LivePredictor
from reservations.context import Loop
from reservations.policy import ReservationChoice, lpj_layout
from slurm_arnold.errors import ArnoldError, InfeasibleError
from slurm_arnold.placement import JobShape, place
from slurm_arnold.slurm import JobInfo
from slurm_arnold.snapshot.queue import ALIVE, reservation_name
from slurm_arnold.snapshot.snapshot import Snapshot
from slurm_arnold.snapshot.view import hostlist_text
from slurm_arnold.snapshot.wait_plan import plan_nodes


def lpj_shape(nodes: int, gpus_per_node: int) -> JobShape:
    """The layout assumed for an LPJ whose layout we do not know (``policy.lpj_layout``)."""
    pp, dp = lpj_layout(nodes)
    return JobShape(gpus_per_node, pp, dp, gpus_per_node)


@dataclass
class Plan:
    """Where an LPJ would be reserved, and why."""

    job: JobInfo
    nodes: tuple[str, ...]
    expected_start: float
    spread: float
    source: str  # "requested nodes" or "policy"
    choice: ReservationChoice | None
    imminent: bool
    predictor: str
    #: Slurm's own estimate of the LPJ's start (backfill's, by time limits), when it has one.
    slurm_start: float | None = None
    #: Node-hours the planned nodes sit idle before the start, and what it saves the LPJ
    #: against ``slurm_start`` (None without one).
    idle_node_h: float = 0.0
    saved_node_h: float | None = None
    #: Whether it pays for itself (always, without Slurm's estimate or with the rule off).
    pays: bool = True

    def as_json(self) -> dict[str, Any]:
        """The ``arnold reserve plan --json`` object."""
        return {
            "job_id": self.job.job_id, "user": self.job.user, "nodes": list(self.nodes),
            "expected_start": round(self.expected_start), "weighted_spread": self.spread,
            "source": self.source, "imminent": self.imminent, "predictor": self.predictor,
            "slurm_start": round(self.slurm_start) if self.slurm_start else None,
            "idle_node_h": round(self.idle_node_h, 2),
            "saved_node_h": None if self.saved_node_h is None else round(self.saved_node_h, 2),
            "pays": self.pays,
            "candidates": [{"pool_nodes": size, "start": round(start), "weighted_spread": sp}
                           for size, start, sp in (self.choice.candidates if self.choice
                                                   else ())],
        }


def plan_lpj(loop: Loop, job_id: int, snap: Snapshot, predictor: LivePredictor) -> Plan:
    """Where LPJ ``job_id`` would be reserved on ``snap`` (a dry run; anyone may ask): on the
    nodes it names when it names all of them, else on the policy's choice among the nodes it
    may use. ``InfeasibleError`` when it cannot be reserved now (it waits as an ordinary job),
    ``ArnoldError`` when it is not a pending LPJ."""
    job = snap.jobs.get(job_id)
    if job is None or job.state not in ALIVE:
        raise ArnoldError(f"job {job_id} is not in the queue; nothing to reserve")
    if job.state != "PENDING":
        raise ArnoldError(f"job {job_id} is {job.state}, not pending; it needs no "
                          "reservation")
    if not snap.is_lpj(job, loop.config):
        raise ArnoldError(
            f"job {job_id} asks for {job.gpus} GPUs, below the site's large-job threshold "
            f"of {loop.settings.large_job_gpus} (reservation.large_job_gpus); it needs no "
            "reservation")
    own = reservation_name(job_id)
    horizon = loop.settings.horizon_h * 3600
    # Slurm's own estimate of the start (backfill's, by limits), before any reservation of
    # ours changes it: what reserving is measured against.
    slurm_start = (float(job.start_time) if loop.settings.pay_for_itself
                   and job.start_time and job.start_time > snap.now
                   and job.reservation != own else None)
    nodes_needed = job.node_count or max(1, job.gpus // snap.gpus_per_node)
    if job.required_nodes and len(job.required_nodes) == nodes_needed:
        clash = set(job.required_nodes) & snap.reserved(but=own)
        if clash:
            raise InfeasibleError(
                f"job {job_id} asks for nodes {sorted(clash)[0]}... that another "
                "reservation holds; it waits as an ordinary job (or resubmit it)")
        drain = snap.drain(predictor)
        for first in snap.naming_jobs(own=own, ahead_of=job):
            taken = sorted(set(first.required_nodes) & set(job.required_nodes))
            if taken:
                # Reserved from now, they would wait for this job: it would pass that one.
                raise InfeasibleError(
                    f"job {job_id} asks for {hostlist_text(taken)}, which job {first.job_id}, "
                    "ahead of it in the queue, waits for by name; not reserved until that "
                    "job starts")
        start = max([snap.now, *(drain.get(n, snap.now) for n in job.required_nodes)])
        shape = lpj_shape(len(job.required_nodes), snap.gpus_per_node)
        # The best layout on exactly those nodes (what arnold-sbatch found for them).
        spread = place(snap.view.topology, job.required_nodes, shape, algo="mip",
                       alpha=0.5).metrics
        idle_h = sum(start - max(snap.now, drain.get(n, snap.now))
                     for n in job.required_nodes) / 3600
        saved_h = None if slurm_start is None else \
            len(job.required_nodes) * (slurm_start - start) / 3600
        return Plan(job, job.required_nodes, start, spread.weighted_spread,
                    "requested nodes", None, start - snap.now <= horizon, predictor.name,
                    slurm_start, idle_h, saved_h,
                    saved_h is None or saved_h >= loop.settings.idle_share * idle_h)
    shape = lpj_shape(nodes_needed, snap.gpus_per_node)
    allowed = snap.allowed(job)
    if len(allowed) < shape.nodes:
        raise InfeasibleError(
            f"job {job_id} needs {shape.nodes} nodes; only {len(allowed)} in service are "
            "in its partition and match its -x/-C; not reserved")
    choice = plan_nodes(snap, predictor, shape, horizon_s=math.inf, own=own,
                        spread_weight_h=loop.settings.spread_weight_h,
                        slurm_start=slurm_start, idle_share=loop.settings.idle_share,
                        reserving_for=job, allowed=allowed)
    pays = choice is not None
    if choice is None:  # no pool pays: where it would go all the same (a forced create)
        choice = plan_nodes(snap, predictor, shape, horizon_s=math.inf, own=own,
                            spread_weight_h=loop.settings.spread_weight_h,
                            reserving_for=job, allowed=allowed)
    assert choice is not None  # an infinite horizon always leaves a pool
    left_out = sorted(set(job.required_nodes) - set(choice.nodes))
    if left_out:
        # Bound to a reservation without them, the job could never start.
        raise InfeasibleError(
            f"job {job_id} asks for {hostlist_text(left_out)} by name (-w) among its "
            f"{shape.nodes} nodes, but the best nodes to reserve for it leave "
            f"{'it' if len(left_out) == 1 else 'them'} out; not reserved (it waits as an "
            "ordinary job; name all of its nodes or none to be reserved)")
    saved_h = None if slurm_start is None else \
        shape.nodes * (slurm_start - choice.expected_start) / 3600
    return Plan(job, choice.nodes, choice.expected_start,
                choice.placement.metrics.weighted_spread, "policy", choice,
                choice.expected_start - snap.now <= horizon, predictor.name, slurm_start,
                choice.idle_node_h, saved_h, pays)
