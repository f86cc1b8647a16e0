"""The predictor's gate: a short job pending for lack of nodes may use an LPJ's idle reserved
nodes when its upper-quantile predicted end is at or before the LPJ's expected start
(``policy.admits``). Its user is added to the reservation and the job bound to it; in
``shrink`` mode its time limit is cut to that start. Slurm's backfill judges by time limits,
not predictions, and would keep an admitted job off nodes its higher-priority LPJ waits for; so
the LPJ is held while an admission is starting and released by the next ``sync`` (the hold is
recorded first, so a ``sync`` killed in between still releases it)."""

from __future__ import annotations

import logging
from dataclasses import replace

from predictor.live import LivePredictor
from reservations.context import Loop
from reservations.policy import admits
from slurm_arnold.errors import InfeasibleError
from slurm_arnold.slurm import JobInfo, Reservation
from slurm_arnold.snapshot.queue import lpj_of
from slurm_arnold.snapshot.snapshot import Snapshot

log = logging.getLogger(__name__)


def expected_start(snap: Snapshot, predictor: LivePredictor, res: Reservation) -> float:
    """When the reservation's nodes drain, leaving out jobs admitted into it (their ends
    must not stretch the window for the next admission)."""
    admitted = {j.job_id for j in snap.jobs.values() if j.reservation == res.name}
    drain = snap.drain(predictor, leave_out=admitted)
    return max([snap.now, *(drain.get(n, snap.now) for n in res.nodes)])


def admit(loop: Loop, snap: Snapshot, predictor: LivePredictor, job: JobInfo,
          source: str) -> str | None:
    """Decide for one pending short job; enact and record. The reservation it was admitted
    to, or ``None``."""
    point, upper = predictor.predict(job)
    try:
        allowed = snap.allowed(job)
    except InfeasibleError as exc:
        log.info("%s", exc)
        return None
    for name, res in sorted(snap.reservations.items()):
        lpj = snap.jobs.get(lpj_of(name) or -1)
        if lpj is None or lpj.state != "PENDING" or res.state.upper() != "ACTIVE":
            continue
        if loop.config.partition and job.partition != lpj.partition:
            continue
        # Only nodes it may run on (partition, -x, -C) and, when it names some (-w),
        # those: bound to the reservation, a job that fits none of its idle nodes would
        # sit there, its LPJ held, until the admission is revoked.
        idle = [n for n in res.nodes if not snap.busy.get(n) and n in allowed]
        need = job.node_count or 1
        if need > len(idle) or not set(job.required_nodes) <= set(idle):
            continue
        expected = expected_start(snap, predictor, res)
        ok = admits(snap.now, upper, expected)
        limit_min = None
        if ok and loop.settings.mode == "shrink":
            limit_min = max(1, int((expected - snap.now) // 60))
            if job.time_limit_min is not None and job.time_limit_min <= limit_min:
                limit_min = None
        loop.records.admission(job.job_id, job.user, name, "admit" if ok else "refuse",
                               source=source, predictor=predictor.name, point=point,
                               upper=upper, expected_start=expected, mode=loop.settings.mode,
                               limit_min=limit_min, now=snap.now)
        if not ok:
            continue
        row = loop.records.reservation(name)
        if row is not None and not row.get("lpj_held") and not lpj.held:
            loop.records.update_reservation(name, lpj_held=1)  # the intent first: see above
            loop.slurm.hold(lpj.job_id)
            loop.actions.append(f"held LPJ {lpj.job_id} while job {job.job_id} starts")
        if job.user not in res.users:
            loop.slurm.update_reservation(name, Users=",".join([*res.users, job.user]))
            # The next admission of this pass builds on this list, not the snapshot's.
            snap.reservations[name] = replace(res, users=(*res.users, job.user))
        fields = {"ReservationName": name}
        if limit_min is not None:
            fields["TimeLimit"] = str(limit_min)
        loop.slurm.update_job(job.job_id, **fields)
        named = [n for n in idle if n in job.required_nodes]
        for n in [*named, *(n for n in idle if n not in named)][:need]:
            snap.busy.setdefault(n, set()).add(job.job_id)
        loop.actions.append(f"admitted job {job.job_id} into {name} (predicted end "
                            f"{upper / 60:.1f} min from now, LPJ expected in "
                            f"{(expected - snap.now) / 60:.1f} min)")
        return name
    return None
