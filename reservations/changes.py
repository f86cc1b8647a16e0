"""Making and removing our reservations in Slurm: create one for an LPJ and bind the LPJ to
it, bind a job, release one (unbinding what still waits in it)."""

from __future__ import annotations

import hostlist

from predictor.live import LivePredictor
from reservations.context import Loop
from reservations.planning import plan_lpj
from slurm_arnold.errors import ArnoldError, InfeasibleError, SlurmError
from slurm_arnold.snapshot.queue import lpj_of, reservation_name
from slurm_arnold.snapshot.snapshot import Snapshot


def create(loop: Loop, job_id: int, snap: Snapshot, predictor: LivePredictor, *,
           force: bool = True) -> str:
    """Reserve the planned nodes for LPJ ``job_id`` and bind it; the reservation's name.
    ``force=False`` (sync) skips an LPJ that is not imminent or whose reservation would not
    pay for itself."""
    name = reservation_name(job_id)
    if name in snap.reservations:
        bind(loop, snap, name, job_id)
        return name
    plan = plan_lpj(loop, job_id, snap, predictor)
    if not plan.imminent and not force:
        raise InfeasibleError(f"job {job_id}: its nodes drain in "
                              f"{(plan.expected_start - snap.now) / 3600:.1f} h, beyond "
                              f"the {loop.settings.horizon_h} h horizon; not yet")
    if not plan.pays and not force:
        raise InfeasibleError(
            f"job {job_id}: reserving would save it {plan.saved_node_h or 0:.1f} node-h "
            f"against Slurm's own start but idle {plan.idle_node_h:.1f} node-h (counted "
            f"at {loop.settings.idle_share:g}); not reserved (reservation.pay_for_itself)")
    loop.slurm.create_reservation(name, plan.nodes, users=[plan.job.user],
                                  flags=["IGNORE_JOBS"])
    loop.actions.append(f"created {name} on {len(plan.nodes)} nodes for job {job_id}")
    loop.records.save_reservation(name, job_id, plan.job.user, plan.nodes,
                                  expected_start=plan.expected_start,
                                  weighted_spread=plan.spread, source=plan.source,
                                  now=snap.now)
    bind(loop, snap, name, job_id)
    return name


def bind(loop: Loop, snap: Snapshot, name: str, job_id: int) -> None:
    """Bind pending job ``job_id`` to reservation ``name`` unless it already is."""
    job = snap.jobs.get(job_id)
    if job is not None and job.state == "PENDING" and job.reservation != name:
        loop.slurm.update_job(job_id, ReservationName=name)
        loop.actions.append(f"bound job {job_id} to {name}")


def release(loop: Loop, name: str, reason: str, snap: Snapshot) -> bool:
    """Delete our reservation ``name``: unbind jobs still pending in it, release an LPJ we
    held, delete it. When jobs still run in it, shrink it to their nodes and say so
    (``False``); the next ``sync`` finishes."""
    if lpj_of(name) is None:
        raise ArnoldError(f"{name} is not one of ours (arnold_<job id>); delete it with "
                          "scontrol")
    row = loop.records.reservation(name)
    for job in snap.jobs.values():
        if job.reservation == name and job.state == "PENDING":
            loop.slurm.update_job(job.job_id, ReservationName="")
            loop.actions.append(f"unbound pending job {job.job_id} from {name}")
    lpj = snap.jobs.get(lpj_of(name) or -1)
    if row and row.get("lpj_held") and lpj is not None and lpj.held:
        loop.slurm.release(lpj.job_id)
        loop.actions.append(f"released job {lpj.job_id} (held by us)")
    done = True
    if name in snap.reservations:
        try:
            loop.slurm.delete_reservation(name)
            loop.actions.append(f"deleted {name} ({reason})")
        except SlurmError as exc:
            if "in use" not in str(exc):
                raise
            running = sorted({n for j in snap.jobs.values() if j.reservation == name
                              and j.state in ("RUNNING", "CONFIGURING", "COMPLETING")
                              for n in j.nodes})
            if running and set(running) != set(snap.reservations[name].nodes):
                loop.slurm.update_reservation(name, Nodes=hostlist.collect_hostlist(running))
                loop.actions.append(f"shrank {name} to the {len(running)} nodes its "
                                    "running jobs use")
            done = False
    if row is not None:
        loop.records.released(name, reason, snap.now, done=done)
    return done
