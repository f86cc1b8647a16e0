"""Where a job that cannot start now should wait: the reservation policy's choice of nodes
(those that drain first, traded against spread) on one snapshot. arnold-sbatch queues a job on
them; the admin loop reserves them for a large job and re-plans a waiting one with them."""

from __future__ import annotations

from collections.abc import Collection

import numpy as np

from reservations.policy import ReservationChoice, choose_reservation
from slurm_arnold.errors import InfeasibleError
from slurm_arnold.placement import JobShape
from slurm_arnold.slurm import JobInfo
from slurm_arnold.snapshot.snapshot import Predictions, Snapshot


def plan_nodes(snap: Snapshot, predictor: Predictions, shape: JobShape, *,
               horizon_s: float, own: str | None = None, spread_weight_h: float = 1.0,
               alpha: float = 0.5, time_limit: float | None = None,
               slurm_start: float | None = None, idle_share: float = 1.0,
               reserving_for: JobInfo | None = None,
               allowed: Collection[str] | None = None) -> ReservationChoice | None:
    """The policy's nodes for an LPJ of ``shape``; ``None`` when it is not imminent or (given
    ``slurm_start``) no pool pays for itself.

    First among nodes in no other reservation and not asked for by name (``-w``) by a pending
    job. When too few are left, among every node outside an admin's reservations, a taken one
    draining when what holds it is expected to end: our reservation's LPJ (its expected start
    plus its limit), a pending job that named it (its nodes' drain plus its limit).

    ``reserving_for``: the plan is for a reservation made now for that pending job, which
    holds its nodes from now on. Then no other reservation's nodes are eligible (Slurm refuses
    overlapping ones), nor the nodes named by a pending job ahead of it in the queue
    (``queue_order``): a reservation on them would keep that job off them until the LPJ
    has run, letting the LPJ pass it. Nodes named only by jobs behind it are eligible as they
    drain, as Slurm's own priority would have it. :class:`InfeasibleError` when too few are
    left: it waits unreserved, and a later ``sync`` tries again.

    ``allowed``: the only nodes the job may run on at all (its partition, ``-x``, ``-w``,
    ``-C``, the reservations its user may use); default every usable one.
    """
    names = [n for n in snap.usable() if allowed is None or n in allowed]
    reserved = snap.reserved(but=own)
    drain = snap.drain(predictor)
    spoken = snap.named_nodes(drain, snap.naming_jobs(own=own))
    eligible = np.array([n not in reserved and n not in spoken for n in names], dtype=bool)
    if int(eligible.sum()) < shape.nodes and reserving_for is not None:
        ahead = snap.named_nodes(drain, snap.naming_jobs(own=own, ahead_of=reserving_for))
        eligible = np.array([n not in reserved and n not in ahead for n in names], dtype=bool)
        if int(eligible.sum()) < shape.nodes:
            raise InfeasibleError(
                f"job {reserving_for.job_id} needs {shape.nodes} nodes; only "
                f"{int(eligible.sum())} are outside other reservations and the nodes jobs "
                "ahead of it in the queue asked for by name; not reserved until they start")
    elif int(eligible.sum()) < shape.nodes:
        after = snap.after_our_lpjs(predictor)
        for n, end in [*after.items(), *spoken.items()]:
            drain[n] = max(drain.get(n, snap.now), end)
        eligible = np.array([n not in reserved or n in after for n in names], dtype=bool)
        if int(eligible.sum()) < shape.nodes:
            raise InfeasibleError(f"the job needs {shape.nodes} nodes; only "
                                  f"{int(eligible.sum())} of those it may use are in no admin's "
                                  "reservation")
    return choose_reservation(
        snap.view.topology, names, np.array([drain.get(n, snap.now) for n in names]),
        eligible, snap.now, shape, alpha=alpha, time_limit=time_limit,
        spread_weight_h=spread_weight_h, horizon_s=horizon_s, slurm_start=slurm_start,
        idle_share=idle_share)
