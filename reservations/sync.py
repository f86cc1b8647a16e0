"""One idempotent pass of the admin loop (``arnold reserve sync``, every minute).

**Slurm is the truth.** Every reservation we make is named ``arnold_<LPJ job id>``; the pass
finds ours by that name, so a reservation made by a run that died before writing the database
is adopted, and one whose LPJ finished, was cancelled or vanished is deleted on the next pass:
none can leak. Jobs, users and node lists come from Slurm, never from files users can write.

In order: waiting jobs arnold-sbatch placed are bound, repaired or replanned
(``reservations.binder``); each of our reservations is kept in step with its LPJ (released once
the LPJ is gone, moved off nodes that left service, the LPJ bound and released from our hold,
users without a job in it removed, its idle time sampled); rows Slurm no longer has are
closed; imminent LPJs are reserved in priority order (``reservations.changes``); short jobs
waiting for nodes are offered the reserved idle nodes (``reservations.admission``).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from predictor.live import LivePredictor
from reservations.admission import admit, expected_start
from reservations.binder import Binder
from reservations.changes import bind, create, release
from reservations.context import Loop
from reservations.planning import plan_lpj
from slurm_arnold.errors import InfeasibleError, SlurmError
from slurm_arnold.site_state import site_lock
from slurm_arnold.slurm import JobInfo, Reservation
from slurm_arnold.snapshot.queue import (
    ALIVE,
    WAITING_FOR_NODES,
    by_priority,
    lpj_of,
    reservation_name,
)
from slurm_arnold.snapshot.snapshot import Snapshot
from slurm_arnold.snapshot.view import hostlist_text

log = logging.getLogger(__name__)


def sync(loop: Loop) -> list[str]:
    """One pass (see the module docstring); the actions taken."""
    # 0. Waiting jobs placed by arnold-sbatch: moved to nodes free now, or off nodes that
    #    failed, under the submit lock so no submission plans on the nodes a job is moved onto.
    snap, predictor = _bind_waiting(loop)
    # 1. Ours in Slurm: delete those whose LPJ is gone; adopt unknown ones; bind; release an
    #    LPJ we held once its admitted jobs have started.
    for name in sorted(snap.reservations):
        job_id = lpj_of(name)
        if job_id is None:
            continue
        lpj = snap.jobs.get(job_id)
        if lpj is None:
            # Not among the unfinished jobs the snapshot reads: ask for this one, for the
            # reason (and in case it was requeued since).
            lpj = loop.slurm.job(job_id)
            if lpj is not None and lpj.state in ALIVE:
                continue
        if lpj is None or lpj.state not in ALIVE:
            why = "its LPJ vanished" if lpj is None else f"its LPJ is {lpj.state}"
            release(loop, name, why, snap)
            continue
        row = loop.records.reservation(name)
        if lpj.held and not (row and row.get("lpj_held")):
            # Held by its user, an admin or Slurm (a failed launch is requeued held): it may
            # wait for ever, and its nodes with it. Reserved again once released (step 3).
            release(loop, name, f"its LPJ is held ({lpj.reason})", snap)
            continue
        if row is None or row["state"] != "active":
            _adopt(loop, snap, name, lpj)
            row = loop.records.reservation(name)
        if lpj.state == "PENDING":
            snap = _keep_in_step(loop, snap, predictor, name, lpj, row)
    # 2. Rows whose reservation Slurm no longer has.
    loop.records.gone_from_slurm(snap.reservations, snap.now)
    # 3. New reservations for imminent LPJs, in priority order.
    ours = sum(1 for n in snap.reservations if lpj_of(n) is not None
               and snap.jobs.get(lpj_of(n) or -1) is not None)
    made = 0
    # Nodes that jobs ahead, waiting for nodes alone, name (-w): a large job behind them is not
    # reserved there (the reservation would hold them back), whatever kept them from a
    # reservation of their own. A held job or one waiting on a dependency keeps no nodes from
    # it (``Snapshot.naming_jobs``' rule): it may wait for ever, and the large job with it.
    named_ahead: set[str] = set()
    for queued in by_priority(snap.jobs.values()):
        if ours >= loop.settings.max_reservations:
            break
        # The snapshot is read again after each reservation made: a job of the first reading
        # may have started or ended since (then it needs none).
        job = snap.jobs.get(queued.job_id)
        if job is None:
            continue
        if (job.state != "PENDING" or not snap.is_lpj(job, loop.config) or job.held
                or reservation_name(job.job_id) in snap.reservations
                or job.reason not in WAITING_FOR_NODES or job.reservation
                or named_ahead & set(job.required_nodes)):
            if job.state == "PENDING" and not job.held and job.reason in WAITING_FOR_NODES:
                named_ahead |= set(job.required_nodes)
            continue
        if loop.config.partition and job.partition != loop.config.partition:
            continue
        try:
            create(loop, job.job_id, snap, predictor, force=False)
        except InfeasibleError as exc:
            log.info("%s", exc)
            continue
        except SlurmError as exc:  # e.g. an admin's new reservation overlaps: next run
            log.warning("job %d: %s", job.job_id, exc)
            continue
        ours += 1
        made += 1
        snap = Snapshot.read(loop.slurm, loop.config)
    if made:
        # A reservation may take nodes a job behind its LPJ was planned on: that job is
        # planned again in this pass, not left bound to nodes it may not use until the next.
        snap, predictor = _bind_waiting(loop)
    # 4. Admissions for short jobs waiting for nodes.
    if any(lpj_of(n) is not None for n in snap.reservations):
        for job in by_priority(snap.jobs.values()):
            if (job.state == "PENDING" and not snap.is_lpj(job, loop.config)
                    and not job.held and not job.reservation
                    and job.reason in WAITING_FOR_NODES):
                admit(loop, snap, predictor, job, "sync")
    return loop.actions


def _bind_waiting(loop: Loop) -> tuple[Snapshot, LivePredictor]:
    """The binder's pass over waiting jobs (``reservations.binder``), under the submit lock so
    no submission plans on the nodes a job is moved onto; the cluster as it is after it."""
    # First in line: behind a burst of submissions the pass would wait for all of them.
    with site_lock(loop.config, first=True):
        snap, predictor = loop.snapshot()
        moved = Binder(loop.config, loop.state, loop.slurm).run(snap, predictor)
    loop.actions.extend(moved)
    if moved:
        snap, predictor = loop.snapshot()
    return snap, predictor


def _keep_in_step(loop: Loop, snap: Snapshot, predictor: LivePredictor, name: str,
                  lpj: JobInfo, row: dict[str, Any] | None) -> Snapshot:
    """Our reservation ``name`` (recorded as ``row``) of pending LPJ ``lpj``: moved off nodes
    it lost, its LPJ bound and (once no admission is starting) released from our hold,
    admissions that were not ours or did not start undone, users without a job in it
    removed, its expected start and idle time recorded. The snapshot, updated."""
    job_id = lpj.job_id
    snap = _off_lost_nodes(loop, snap, predictor, name, lpj)
    bind(loop, snap, name, job_id)
    starting = []
    unbound: set[int] = set()
    for j in snap.jobs.values():
        if j.reservation != name or j.job_id == job_id or j.state != "PENDING":
            continue
        decided = loop.records.admitted_at(j.job_id, name)
        if decided is None and j.user != lpj.user:
            # Bound by its user (--reservation), not admitted by us: a user once admitted
            # must not keep a way past the gate.
            loop.slurm.update_job(j.job_id, ReservationName="")
            loop.actions.append(f"unbound job {j.job_id} from {name}: not admitted")
            unbound.add(j.job_id)
        elif decided is not None and snap.now - decided > 50:
            # An admission that did not start in a whole period.
            loop.slurm.update_job(j.job_id, ReservationName="")
            loop.actions.append(f"revoked job {j.job_id}'s admission to {name}: it did not "
                                "start")
            unbound.add(j.job_id)
        else:
            starting.append(j)
    if row and row.get("lpj_held") and not starting:
        if lpj.held:
            loop.slurm.release(job_id)
            loop.actions.append(f"released LPJ {job_id}")
        loop.records.update_reservation(name, lpj_held=0)
    res = snap.reservations[name]
    _prune_users(loop, name, res, lpj, snap, unbound)
    loop.records.update_reservation(
        name, expected_start=expected_start(snap, predictor, res),
        **_idle_sample(loop, snap, name, res.nodes))
    return snap


def _off_lost_nodes(loop: Loop, snap: Snapshot, predictor: LivePredictor, name: str,
                    lpj: JobInfo) -> Snapshot:
    """Move reservation ``name`` off nodes its pending LPJ can no longer use (drained, down,
    out of its partition): planned afresh by the policy, the nodes rewritten in place.
    Without it the LPJ, bound to the reservation, would wait for them for good. An LPJ that
    names all of its nodes (arnold-sbatch's, moved by the binder with its ``-w``, or a user's
    exact choice) is left alone. The snapshot, updated."""
    res = snap.reservations[name]
    if lpj.required_nodes and len(lpj.required_nodes) >= lpj.node_count:
        return snap
    try:
        lost = sorted(set(res.nodes) - snap.allowed(lpj))
    except InfeasibleError:
        return snap
    if not lost:
        return snap
    try:
        plan = plan_lpj(loop, lpj.job_id, snap, predictor)
    except InfeasibleError as exc:
        log.warning("%s: %s unusable and no new nodes for job %d: %s", name, hostlist_text(lost),
                    lpj.job_id, exc)
        return snap
    try:
        loop.slurm.update_reservation(name, Nodes=hostlist_text(plan.nodes))
    except SlurmError as exc:
        log.warning("%s: %s unusable; moving it failed: %s", name, hostlist_text(lost), exc)
        return snap
    loop.actions.append(f"moved {name} off {hostlist_text(lost)} (unusable) to "
                        f"{hostlist_text(plan.nodes)}")
    loop.records.update_reservation(name, nodes=list(plan.nodes),
                                    expected_start=plan.expected_start,
                                    weighted_spread=plan.spread)
    return replace(snap, reservations={**snap.reservations,
                                       name: replace(res, nodes=plan.nodes)})


def _prune_users(loop: Loop, name: str, res: Reservation, lpj: JobInfo, snap: Snapshot,
                 unbound: set[int]) -> None:
    """Leave in the reservation only the LPJ's user and those with a job still in it
    (admitted, pending or running): an admission lets one job in, not its user for good
    (``sbatch --reservation`` would pass the gate)."""
    keep = {lpj.user} | {j.user for j in snap.jobs.values() if j.reservation == name
                         and j.state in ALIVE and j.job_id not in unbound}
    gone = sorted(set(res.users) - keep)
    if not gone:
        return
    loop.slurm.update_reservation(name, Users=",".join(
        [u for u in res.users if u in keep] or [lpj.user]))
    loop.actions.append(f"removed {', '.join(gone)} from {name}: no job of theirs in it")


def _idle_sample(loop: Loop, snap: Snapshot, name: str, nodes: Sequence[str]) -> dict[str, Any]:
    """The reservation's idle node-seconds so far: the nodes that ran nothing (no admitted
    job, no job still draining) at the last sync, times the time since; and this sync's count
    for the next. What the reservation costs everyone else."""
    row = loop.records.reservation(name) or {}
    idle_now = sum(1 for n in nodes if not snap.busy.get(n))
    last = row.get("idle_checked_at") or row.get("created_at") or snap.now
    counted = row.get("idle_nodes")
    total = float(row.get("idle_node_s") or 0.0) + (
        idle_now if counted is None else counted) * max(0.0, snap.now - last)
    return {"idle_node_s": total, "idle_nodes": idle_now, "idle_checked_at": snap.now}


def _adopt(loop: Loop, snap: Snapshot, name: str, lpj: JobInfo) -> None:
    res = snap.reservations[name]
    loop.records.save_reservation(name, lpj.job_id, lpj.user, res.nodes,
                                  expected_start=snap.now, weighted_spread=None,
                                  source="adopted", now=snap.now)
    loop.actions.append(f"adopted {name} (made by a run that stopped before recording it)")
