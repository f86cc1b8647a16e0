"""Arnold's policy on the live cluster: Slurm reservations for large pending jobs (LPJs) and the
predictor's gate for short jobs, kept in step with Slurm by an idempotent ``sync``.

**Slurm is the truth.** Every reservation we make is named ``arnold_<LPJ job id>``; ``sync``
finds ours by that name, so a reservation made by a run that died before writing the database
is adopted, and one whose LPJ finished, was cancelled or vanished is deleted on the next run:
none can leak. Jobs, users and node lists come from Slurm, never from files users can write.
The state database only records what we did and why (each admission decision with the
prediction behind it).

**An LPJ** (a pending job of at least ``reservation.large_job_gpus`` GPUs) gets a reservation
on exactly its nodes for its user, ``StartTime=now`` with ``IGNORE_JOBS`` (running jobs keep
running; a reservation on busy nodes is refused without it), and is bound to it
(``ReservationName``). Its nodes are the ones it asked for (``-w``: arnold-sbatch plans them
with this policy and writes the rank files for them) or, for a job that named none, the
policy's choice (``reservations.policy.choose_reservation``). Only imminent LPJs are reserved:
nodes expected to drain within ``reservation.horizon_h``.

**A short job** pending for lack of resources may use the LPJ's idle reserved nodes when its
upper-quantile predicted end is at or before the LPJ's expected start (``policy.admits``):
its user is added to the reservation and the job bound to it; in ``shrink`` mode its time
limit is cut to the expected start (Slurm 22.05's ``--time-min`` would give exactly the
minimum, so we set the limit ourselves). Slurm's backfill judges by time limits, not
predictions, and would keep an admitted job off nodes its higher-priority LPJ waits for; so
the LPJ is held while an admission is starting and released by the next ``sync`` (the hold is
recorded first, so a ``sync`` killed in between still releases it).
"""

from __future__ import annotations

import fcntl
import json
import logging
import math
import os
import time
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import hostlist
import numpy as np

from predictor.features import compute_one
from predictor.history import load_history
from predictor.model import JctModel, ModelError
from predictor.swf import JobRecord
from reservations.policy import (
    ReservationChoice,
    admits,
    choose_reservation,
    expected_end,
    lpj_layout,
)
from site_config import SiteConfig
from slurm_arnold.admins import NotAdmin, require_admin
from slurm_arnold.cluster import ClusterView, live_cluster
from slurm_arnold.errors import ArnoldError, InfeasibleError, SlurmError
from slurm_arnold.placement import JobShape, place
from slurm_arnold.slurm import UNAVAILABLE_FLAGS, JobInfo, Reservation, Slurm
from slurm_arnold.state import StateDB

__all__ = ["NotAdmin", "Reserver", "require_admin"]
log = logging.getLogger(__name__)
PREFIX = "arnold_"
ALIVE = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED",
         "RESIZING")
# Reasons a pending job may be waiting only for nodes (others: held, dependency, limits...).
# Flags that take a node out of service (not merely busy: COMPLETING and PLANNED nodes drain
# like any other).
OUT_OF_SERVICE = UNAVAILABLE_FLAGS - {"COMPLETING", "PLANNED"}
WAITING_FOR_NODES = ("Resources", "Priority", "None", "ReqNodeNotAvail", "Reservation")


def reservation_name(job_id: int) -> str:
    """Our reservation's name for an LPJ."""
    return f"{PREFIX}{job_id}"


def lpj_of(name: str) -> int | None:
    """The LPJ job id of one of our reservations (``None`` for anyone else's)."""
    rest = name.removeprefix(PREFIX)
    return int(rest) if name.startswith(PREFIX) and rest.isdigit() else None


def lpj_shape(nodes: int, gpus_per_node: int) -> JobShape:
    """The layout assumed for an LPJ whose layout we do not know (``policy.lpj_layout``)."""
    pp, dp = lpj_layout(nodes)
    return JobShape(gpus_per_node, pp, dp, gpus_per_node)


class LivePredictor:
    """Upper-quantile run-time predictions of live jobs: the serving model when there is one,
    else each job's time limit (``requested``)."""

    def __init__(self, config: SiteConfig, state: StateDB | None,
                 jobs: Sequence[JobInfo]) -> None:
        """``state`` is the site's database (opened read-only on first need when ``None``)."""
        self.config = config
        self._loaded = False
        self._model: JctModel | None = None
        self._name = "requested"
        self.state = state
        self.jobs = jobs
        self._history: dict[str, list[JobRecord]] = {}
        self._cache: dict[int, tuple[float, float]] = {}

    def _load(self) -> None:
        """The serving model, read on first use (most calls never need it)."""
        if self._loaded:
            return
        self._loaded = True
        if self.config.reservation.predictor == "model_q":
            from predictor.service import load_serving

            try:
                self._model = load_serving(self.config)
                self._name = "model_q"
            except ModelError as exc:
                log.warning("%s; gating on time limits instead", exc)

    @property
    def model(self) -> JctModel | None:
        """The serving model, or ``None`` (gate on time limits)."""
        self._load()
        return self._model

    @property
    def name(self) -> str:
        """``model_q`` or ``requested``: what the predictions are."""
        self._load()
        return self._name

    def predict(self, job: JobInfo) -> tuple[float, float]:
        """(point, upper) predicted run time in seconds; both the limit without a model."""
        cached = self._cache.get(job.job_id)
        if cached is not None:
            return cached
        limit = float(job.time_limit_min * 60) if job.time_limit_min else math.inf
        if self.model is None:
            out = (limit, limit)
        else:
            from predictor.service import queue_load

            history = self._history.get(job.user)
            if history is None:
                if self.state is None:
                    from slurm_arnold.site_state import open_site_db

                    self.state = open_site_db(self.config)
                history = self._history[job.user] = load_history(self.state, user=job.user)
            submit = job.submit_time or int(time.time())
            record = JobRecord(str(job.job_id), job.user, "", job.partition, "", job.name,
                               submit, None, None, job.node_count or None, job.gpus or None,
                               None, job.time_limit_min * 60 if job.time_limit_min else None,
                               job.state, None)
            before = [h for h in history if (h.end or 0) <= submit]
            row = compute_one(record, before, self.model.vocab,
                              queue_load(self.jobs, job.user, exclude=job.job_id,
                                         time_limit=record.time_limit, now=submit))[None, :]
            point, upper = self.model.predict(row, [limit if math.isfinite(limit) else None])
            out = (float(point[0]), float(upper[0]))
        self._cache[job.job_id] = out
        return out


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
    def read(cls, slurm: Slurm, config: SiteConfig, partition: str | None = None) -> Snapshot:
        """Read the cluster now (``partition``: the one its usable nodes are of, default the
        site's)."""
        view = live_cluster(slurm, minipod_level=config.minipod_level,
                            partition=partition or config.partition)
        jobs = {j.job_id: j for j in slurm.jobs()}
        busy: dict[str, set[int]] = {}
        for j in jobs.values():
            if j.state in ("RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED"):
                for n in j.nodes:
                    busy.setdefault(n, set()).add(j.job_id)
        g = view.common_gpus(view.topology.nodes) if view.nodes else 8
        return cls(time.time(), view, jobs, {r.name: r for r in slurm.reservations()}, g,
                   busy)

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
        from slurm_arnold.submit.flow import narrow_free

        partitions: list[str | None] = [p for p in job.partition.split(",") if p] or [None]
        usable = {n for p in partitions for n in self.usable(p)}
        narrowing = {"exclude": _hostlist(job.excluded_nodes)} if job.excluded_nodes else {}
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

    def drain(self, predictor: LivePredictor, *, leave_out: Iterable[int] = ()) -> dict[str,
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

    def after_our_lpjs(self, predictor: LivePredictor) -> dict[str, float]:
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


def plan_nodes(snap: Snapshot, predictor: LivePredictor, shape: JobShape, *,
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
    (:func:`queue_order`): a reservation on them would keep that job off them until the LPJ
    has run, letting the LPJ pass it. Nodes named only by jobs behind it are eligible as they
    drain, as Slurm's own priority would have it. :class:`InfeasibleError` when too few are
    left: it waits unreserved, and a later ``sync`` tries again.

    ``allowed``: the only nodes the job may run on at all (its partition, ``-x``, ``-w``,
    ``-C``, the reservations its user may use); default every usable one.
    """
    names = [n for n in snap.usable() if allowed is None or n in allowed]
    reserved = snap.reserved(but=own)
    drain = snap.drain(predictor)
    spoken = named_nodes(snap, drain, naming_jobs(snap, own=own))
    eligible = np.array([n not in reserved and n not in spoken for n in names], dtype=bool)
    if int(eligible.sum()) < shape.nodes and reserving_for is not None:
        ahead = named_nodes(snap, drain,
                            naming_jobs(snap, own=own, ahead_of=reserving_for))
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


def naming_jobs(snap: Snapshot, *, own: str | None = None,
                ahead_of: JobInfo | None = None) -> list[JobInfo]:
    """Pending jobs that asked for nodes by name (``-w``), in queue order; never the job whose
    reservation is ``own``. Given ``ahead_of``, only those ahead of it in the queue that wait
    for nodes alone (a held job, or one waiting on a dependency, keeps no nodes from it)."""
    out = []
    for job in snap.jobs.values():
        if job.state != "PENDING" or not job.required_nodes \
                or reservation_name(job.job_id) == own:
            continue
        if ahead_of is not None and (queue_order(job) >= queue_order(ahead_of) or job.held
                                     or job.reason not in WAITING_FOR_NODES):
            continue
        out.append(job)
    return sorted(out, key=queue_order)


def named_nodes(snap: Snapshot, drain: dict[str, float],
                jobs: Iterable[JobInfo]) -> dict[str, float]:
    """The nodes ``jobs`` asked for by name, each with when the last of them is expected to
    end there (its nodes' drain, ``drain``, plus its limit)."""
    out: dict[str, float] = {}
    for job in jobs:
        start = max([snap.now, *(drain.get(n, snap.now) for n in job.required_nodes)])
        end = start + (job.time_limit_min * 60 if job.time_limit_min else math.inf)
        for n in job.required_nodes:
            out[n] = max(out.get(n, snap.now), end)
    return out


def queue_order(job: JobInfo) -> tuple[int, int, int]:
    """Where ``job`` stands in Slurm's queue: higher priority first, then earlier submits."""
    return (-job.priority, job.submit_time or 0, job.job_id)


class Reserver:
    """``arnold reserve``: plan, create, release, sync (see the module docstring)."""

    def __init__(self, config: SiteConfig, state: StateDB, slurm: Slurm | None = None) -> None:
        self.config = config
        self.settings = config.reservation
        self.state = state
        self.slurm = slurm or Slurm()
        self.actions: list[str] = []

    @contextmanager
    def lock(self) -> Iterator[None]:
        """One changer of reservations at a time (``sync``, ``create``, ``release`` and an
        admin's arnold-sbatch): each plans on a fresh reading, so two at once could both pick
        the same nodes."""
        self.config.state_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.config.state_dir / "reserve.lock", os.O_RDWR | os.O_CREAT, 0o600)
        os.fchmod(fd, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    # -- reading ------------------------------------------------------------------------
    def snapshot(self) -> tuple[Snapshot, LivePredictor]:
        """Slurm now, and the predictor over its jobs."""
        snap = Snapshot.read(self.slurm, self.config)
        return snap, LivePredictor(self.config, self.state, list(snap.jobs.values()))

    def plan(self, job_id: int, snap: Snapshot | None = None,
             predictor: LivePredictor | None = None) -> Plan:
        """Where ``job_id`` would be reserved (a dry run; anyone may ask)."""
        if snap is None or predictor is None:
            snap, predictor = self.snapshot()
        job = snap.jobs.get(job_id)
        if job is None or job.state not in ALIVE:
            raise ArnoldError(f"job {job_id} is not in the queue; nothing to reserve")
        if job.state != "PENDING":
            raise ArnoldError(f"job {job_id} is {job.state}, not pending; it needs no "
                              "reservation")
        if not snap.is_lpj(job, self.config):
            raise ArnoldError(
                f"job {job_id} asks for {job.gpus} GPUs, below the site's large-job threshold "
                f"of {self.settings.large_job_gpus} (reservation.large_job_gpus); it needs no "
                "reservation")
        own = reservation_name(job_id)
        horizon = self.settings.horizon_h * 3600
        # Slurm's own estimate of the start (backfill's, by limits), before any reservation of
        # ours changes it: what reserving is measured against.
        slurm_start = (float(job.start_time) if self.settings.pay_for_itself
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
            for first in naming_jobs(snap, own=own, ahead_of=job):
                taken = sorted(set(first.required_nodes) & set(job.required_nodes))
                if taken:
                    # Reserved from now, they would wait for this job: it would pass that one.
                    raise InfeasibleError(
                        f"job {job_id} asks for {_hostlist(taken)}, which job {first.job_id}, "
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
                        saved_h is None or saved_h >= self.settings.idle_share * idle_h)
        shape = lpj_shape(nodes_needed, snap.gpus_per_node)
        allowed = snap.allowed(job)
        if len(allowed) < shape.nodes:
            raise InfeasibleError(
                f"job {job_id} needs {shape.nodes} nodes; only {len(allowed)} in service are "
                "in its partition and match its -x/-C; not reserved")
        choice = plan_nodes(snap, predictor, shape, horizon_s=math.inf, own=own,
                            spread_weight_h=self.settings.spread_weight_h,
                            slurm_start=slurm_start, idle_share=self.settings.idle_share,
                            reserving_for=job, allowed=allowed)
        pays = choice is not None
        if choice is None:  # no pool pays: where it would go all the same (a forced create)
            choice = plan_nodes(snap, predictor, shape, horizon_s=math.inf, own=own,
                                spread_weight_h=self.settings.spread_weight_h,
                                reserving_for=job, allowed=allowed)
        assert choice is not None  # an infinite horizon always leaves a pool
        left_out = sorted(set(job.required_nodes) - set(choice.nodes))
        if left_out:
            # Bound to a reservation without them, the job could never start.
            raise InfeasibleError(
                f"job {job_id} asks for {_hostlist(left_out)} by name (-w) among its "
                f"{shape.nodes} nodes, but the best nodes to reserve for it leave "
                f"{'it' if len(left_out) == 1 else 'them'} out; not reserved (it waits as an "
                "ordinary job; name all of its nodes or none to be reserved)")
        saved_h = None if slurm_start is None else \
            shape.nodes * (slurm_start - choice.expected_start) / 3600
        return Plan(job, choice.nodes, choice.expected_start,
                    choice.placement.metrics.weighted_spread, "policy", choice,
                    choice.expected_start - snap.now <= horizon, predictor.name, slurm_start,
                    choice.idle_node_h, saved_h, pays)

    # -- changing ------------------------------------------------------------------------
    def create(self, job_id: int, snap: Snapshot | None = None,
               predictor: LivePredictor | None = None, *, force: bool = True) -> str:
        """Reserve the planned nodes for LPJ ``job_id`` and bind it; the reservation's name.
        ``force=False`` (sync) skips an LPJ that is not imminent."""
        name = reservation_name(job_id)
        if snap is None or predictor is None:
            snap, predictor = self.snapshot()
        if name in snap.reservations:
            self._bind(snap, name, job_id)
            return name
        plan = self.plan(job_id, snap, predictor)
        if not plan.imminent and not force:
            raise InfeasibleError(f"job {job_id}: its nodes drain in "
                                  f"{(plan.expected_start - snap.now) / 3600:.1f} h, beyond "
                                  f"the {self.settings.horizon_h} h horizon; not yet")
        if not plan.pays and not force:
            raise InfeasibleError(
                f"job {job_id}: reserving would save it {plan.saved_node_h or 0:.1f} node-h "
                f"against Slurm's own start but idle {plan.idle_node_h:.1f} node-h (counted "
                f"at {self.settings.idle_share:g}); not reserved (reservation.pay_for_itself)")
        self.slurm.create_reservation(name, plan.nodes, users=[plan.job.user],
                                      flags=["IGNORE_JOBS"])
        self.actions.append(f"created {name} on {len(plan.nodes)} nodes for job {job_id}")
        with self.state.transaction() as db:
            db["reservations"].upsert({  # type: ignore[union-attr]
                "name": name, "lpj_job_id": job_id, "user": plan.job.user,
                "nodes": list(plan.nodes), "expected_start": plan.expected_start,
                "weighted_spread": plan.spread, "source": plan.source,
                "created_at": snap.now, "state": "active", "lpj_held": 0,
                "released_at": None, "release_reason": None}, pk="name")
        self._bind(snap, name, job_id)
        return name

    def _bind(self, snap: Snapshot, name: str, job_id: int) -> None:
        job = snap.jobs.get(job_id)
        if job is not None and job.state == "PENDING" and job.reservation != name:
            self.slurm.update_job(job_id, ReservationName=name)
            self.actions.append(f"bound job {job_id} to {name}")

    def release(self, name: str, reason: str, snap: Snapshot | None = None) -> bool:
        """Delete our reservation ``name``: unbind jobs still pending in it, release an LPJ we
        held, delete it. When jobs still run in it, shrink it to their nodes and say so
        (``False``); the next ``sync`` finishes."""
        if lpj_of(name) is None:
            raise ArnoldError(f"{name} is not one of ours (arnold_<job id>); delete it with "
                              "scontrol")
        if snap is None:
            snap = Snapshot.read(self.slurm, self.config)
        row = self._row(name)
        for job in snap.jobs.values():
            if job.reservation == name and job.state == "PENDING":
                self.slurm.update_job(job.job_id, ReservationName="")
                self.actions.append(f"unbound pending job {job.job_id} from {name}")
        lpj = snap.jobs.get(lpj_of(name) or -1)
        if row and row.get("lpj_held") and lpj is not None and lpj.held:
            self.slurm.release(lpj.job_id)
            self.actions.append(f"released job {lpj.job_id} (held by us)")
        done = True
        if name in snap.reservations:
            try:
                self.slurm.delete_reservation(name)
                self.actions.append(f"deleted {name} ({reason})")
            except SlurmError as exc:
                if "in use" not in str(exc):
                    raise
                running = sorted({n for j in snap.jobs.values() if j.reservation == name
                                  and j.state in ("RUNNING", "CONFIGURING", "COMPLETING")
                                  for n in j.nodes})
                if running and set(running) != set(snap.reservations[name].nodes):
                    self.slurm.update_reservation(name, Nodes=_hostlist(running))
                    self.actions.append(f"shrank {name} to the {len(running)} nodes its "
                                        "running jobs use")
                done = False
        with self.state.transaction() as db:
            if row is not None:
                db["reservations"].update(name, {  # type: ignore[union-attr]
                    "state": "released" if done else "releasing",
                    "released_at": snap.now, "release_reason": reason})
        return done

    # -- admissions ---------------------------------------------------------------------
    def expected_start(self, snap: Snapshot, predictor: LivePredictor, res: Reservation) -> float:
        """When the reservation's nodes drain, leaving out jobs admitted into it (their ends
        must not stretch the window for the next admission)."""
        admitted = {j.job_id for j in snap.jobs.values() if j.reservation == res.name}
        drain = snap.drain(predictor, leave_out=admitted)
        return max([snap.now, *(drain.get(n, snap.now) for n in res.nodes)])

    def admit(self, snap: Snapshot, predictor: LivePredictor, job: JobInfo,
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
            if self.config.partition and job.partition != lpj.partition:
                continue
            # Only nodes it may run on (partition, -x, -C) and, when it names some (-w),
            # those: bound to the reservation, a job that fits none of its idle nodes would
            # sit there, its LPJ held, until the admission is revoked.
            idle = [n for n in res.nodes if not snap.busy.get(n) and n in allowed]
            need = job.node_count or 1
            if need > len(idle) or not set(job.required_nodes) <= set(idle):
                continue
            expected = self.expected_start(snap, predictor, res)
            ok = admits(snap.now, upper, expected)
            limit_min = None
            if ok and self.settings.mode == "shrink":
                limit_min = max(1, int((expected - snap.now) // 60))
                if job.time_limit_min is not None and job.time_limit_min <= limit_min:
                    limit_min = None
            self._record(job, name, "admit" if ok else "refuse", predictor.name, point, upper,
                         expected, limit_min, source, snap.now)
            if not ok:
                continue
            row = self._row(name)
            if row is not None and not row.get("lpj_held") and not lpj.held:
                with self.state.transaction() as db:  # the intent first: see the docstring
                    db["reservations"].update(name, {"lpj_held": 1})  # type: ignore[union-attr]
                self.slurm.hold(lpj.job_id)
                self.actions.append(f"held LPJ {lpj.job_id} while job {job.job_id} starts")
            if job.user not in res.users:
                self.slurm.update_reservation(name, Users=",".join([*res.users, job.user]))
                # The next admission of this pass builds on this list, not the snapshot's.
                snap.reservations[name] = replace(res, users=(*res.users, job.user))
            fields = {"ReservationName": name}
            if limit_min is not None:
                fields["TimeLimit"] = str(limit_min)
            self.slurm.update_job(job.job_id, **fields)
            named = [n for n in idle if n in job.required_nodes]
            for n in [*named, *(n for n in idle if n not in named)][:need]:
                snap.busy.setdefault(n, set()).add(job.job_id)
            self.actions.append(f"admitted job {job.job_id} into {name} (predicted end "
                                f"{upper / 60:.1f} min from now, LPJ expected in "
                                f"{(expected - snap.now) / 60:.1f} min)")
            return name
        return None

    def _record(self, job: JobInfo, name: str, decision: str, predictor: str, point: float,
                upper: float, expected: float, limit_min: int | None, source: str,
                now: float) -> None:
        table = self.state.db.table("admissions")
        with self.state.transaction():
            same = list(table.rows_where("job_id = ? and reservation = ? and decision = ?",
                                         [job.job_id, name, decision], limit=1))
            if same:  # the same answer again: keep one row, note when it was last given
                table.update(same[0]["id"], {"last_decided_at": now, "expected_start": expected,
                                             "times": same[0]["times"] + 1})
                return
            table.insert({
                "job_id": job.job_id, "user": job.user, "reservation": name,
                "decision": decision, "source": source, "predictor": predictor,
                "predicted_s": _finite(point), "upper_s": _finite(upper),
                "expected_start": expected, "mode": self.settings.mode,
                "time_limit_min": limit_min, "decided_at": now, "last_decided_at": now,
                "times": 1})

    def _row(self, name: str) -> dict[str, Any] | None:
        rows = list(self.state.db.table("reservations").rows_where("name = ?", [name]))
        return rows[0] if rows else None

    # -- the sync loop ------------------------------------------------------------------
    def sync(self) -> list[str]:
        """One idempotent pass (see the module docstring); the actions taken."""
        from reservations.binder import Binder
        from slurm_arnold.site_state import site_lock

        # 0. Waiting jobs placed by arnold-sbatch: moved to nodes free now, or off nodes
        #    that failed (reservations.binder), under the submit lock so no submission
        #    plans on the nodes a job is moved onto.
        with site_lock(self.config):
            snap, predictor = self.snapshot()
            moved = Binder(self.config, self.state, self.slurm).run(snap, predictor)
        self.actions.extend(moved)
        if moved:
            snap, predictor = self.snapshot()
        # 1. Ours in Slurm: delete those whose LPJ is gone; adopt unknown ones; bind; release
        #    an LPJ we held once its admitted jobs have started.
        for name in sorted(snap.reservations):
            job_id = lpj_of(name)
            if job_id is None:
                continue
            lpj = snap.jobs.get(job_id)
            if lpj is None or lpj.state not in ALIVE:
                why = "its LPJ vanished" if lpj is None else f"its LPJ is {lpj.state}"
                self.release(name, why, snap)
                continue
            row = self._row(name)
            if row is None or row["state"] != "active":
                self._adopt(snap, name, lpj)
                row = self._row(name)
            if lpj.state == "PENDING":
                snap = self._off_lost_nodes(snap, predictor, name, lpj)
                self._bind(snap, name, job_id)
                starting = []
                unbound: set[int] = set()
                for j in snap.jobs.values():
                    if j.reservation != name or j.job_id == job_id or j.state != "PENDING":
                        continue
                    decided = self._admitted_at(j.job_id, name)
                    if decided is None and j.user != lpj.user:
                        # Bound by its user (--reservation), not admitted by us: a user once
                        # admitted must not keep a way past the gate.
                        self.slurm.update_job(j.job_id, ReservationName="")
                        self.actions.append(f"unbound job {j.job_id} from {name}: not "
                                            "admitted")
                        unbound.add(j.job_id)
                    elif decided is not None and snap.now - decided > 50:
                        # An admission that did not start in a whole period.
                        self.slurm.update_job(j.job_id, ReservationName="")
                        self.actions.append(f"revoked job {j.job_id}'s admission to {name}: "
                                            "it did not start")
                        unbound.add(j.job_id)
                    else:
                        starting.append(j)
                if row and row.get("lpj_held") and not starting:
                    if lpj.held:
                        self.slurm.release(job_id)
                        self.actions.append(f"released LPJ {job_id}")
                    with self.state.transaction() as db:
                        db["reservations"].update(name, {"lpj_held": 0})  # type: ignore
                res = snap.reservations[name]
                self._prune_users(name, res, lpj, snap, unbound)
                idle = self._idle_sample(snap, name, res.nodes)
                with self.state.transaction() as db:
                    db["reservations"].update(name, {  # type: ignore[union-attr]
                        "expected_start": self.expected_start(snap, predictor, res)} | idle)
        # 2. Rows whose reservation Slurm no longer has.
        with self.state.transaction() as db:
            for row in db["reservations"].rows_where("state != 'released'"):
                if row["name"] not in snap.reservations:
                    db["reservations"].update(row["name"], {  # type: ignore[union-attr]
                        "state": "released", "released_at": snap.now,
                        "release_reason": row["release_reason"] or "gone from Slurm"})
        # 3. New reservations for imminent LPJs, in priority order.
        ours = sum(1 for n in snap.reservations if lpj_of(n) is not None
                   and snap.jobs.get(lpj_of(n) or -1) is not None)
        for queued in _by_priority(snap.jobs.values()):
            if ours >= self.settings.max_reservations:
                break
            # The snapshot is read again after each reservation made: a job of the first
            # reading may have started or ended since (then it needs none).
            job = snap.jobs.get(queued.job_id)
            if job is None:
                continue
            if (job.state != "PENDING" or not snap.is_lpj(job, self.config) or job.held
                    or reservation_name(job.job_id) in snap.reservations
                    or job.reason not in WAITING_FOR_NODES or job.reservation):
                continue
            if self.config.partition and job.partition != self.config.partition:
                continue
            try:
                self.create(job.job_id, snap, predictor, force=False)
            except InfeasibleError as exc:
                log.info("%s", exc)
                continue
            except SlurmError as exc:  # e.g. an admin's new reservation overlaps: next run
                log.warning("job %d: %s", job.job_id, exc)
                continue
            ours += 1
            snap = Snapshot.read(self.slurm, self.config)
        # 4. Admissions for short jobs waiting for nodes.
        if any(lpj_of(n) is not None for n in snap.reservations):
            for job in _by_priority(snap.jobs.values()):
                if (job.state == "PENDING" and not snap.is_lpj(job, self.config)
                        and not job.held and not job.reservation
                        and job.reason in WAITING_FOR_NODES):
                    self.admit(snap, predictor, job, "sync")
        return self.actions

    def _off_lost_nodes(self, snap: Snapshot, predictor: LivePredictor, name: str,
                        lpj: JobInfo) -> Snapshot:
        """Move reservation ``name`` off nodes its pending LPJ can no longer use (drained,
        down, out of its partition): planned afresh by the policy, the nodes rewritten in
        place. Without it the LPJ, bound to the reservation, would wait for them for good.
        An LPJ that names all of its nodes (arnold-sbatch's, moved by the binder with its
        ``-w``, or a user's exact choice) is left alone. The snapshot, updated."""
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
            plan = self.plan(lpj.job_id, snap, predictor)
        except InfeasibleError as exc:
            log.warning("%s: %s unusable and no new nodes for job %d: %s", name,
                        _hostlist(lost), lpj.job_id, exc)
            return snap
        try:
            self.slurm.update_reservation(name, Nodes=_hostlist(plan.nodes))
        except SlurmError as exc:
            log.warning("%s: %s unusable; moving it failed: %s", name, _hostlist(lost), exc)
            return snap
        self.actions.append(f"moved {name} off {_hostlist(lost)} (unusable) to "
                            f"{_hostlist(plan.nodes)}")
        with self.state.transaction() as db:
            db["reservations"].update(name, {  # type: ignore[union-attr]
                "nodes": list(plan.nodes), "expected_start": plan.expected_start,
                "weighted_spread": plan.spread})
        return replace(snap, reservations={**snap.reservations,
                                           name: replace(res, nodes=plan.nodes)})

    def _prune_users(self, name: str, res: Reservation, lpj: JobInfo, snap: Snapshot,
                     unbound: set[int]) -> None:
        """Leave in the reservation only the LPJ's user and those with a job still in it
        (admitted, pending or running): an admission lets one job in, not its user for good
        (``sbatch --reservation`` would pass the gate)."""
        keep = {lpj.user} | {j.user for j in snap.jobs.values() if j.reservation == name
                             and j.state in ALIVE and j.job_id not in unbound}
        gone = sorted(set(res.users) - keep)
        if not gone:
            return
        self.slurm.update_reservation(name, Users=",".join(
            [u for u in res.users if u in keep] or [lpj.user]))
        self.actions.append(f"removed {', '.join(gone)} from {name}: no job of theirs in it")

    def _idle_sample(self, snap: Snapshot, name: str, nodes: Sequence[str]) -> dict[str, Any]:
        """The reservation's idle node-seconds so far: the nodes that ran nothing (no
        admitted job, no job still draining) at the last sync, times the time since; and
        this sync's count for the next. What the reservation costs everyone else."""
        row = self._row(name) or {}
        idle_now = sum(1 for n in nodes if not snap.busy.get(n))
        last = row.get("idle_checked_at") or row.get("created_at") or snap.now
        counted = row.get("idle_nodes")
        total = float(row.get("idle_node_s") or 0.0) + (
            idle_now if counted is None else counted) * max(0.0, snap.now - last)
        return {"idle_node_s": total, "idle_nodes": idle_now, "idle_checked_at": snap.now}

    def _adopt(self, snap: Snapshot, name: str, lpj: JobInfo) -> None:
        res = snap.reservations[name]
        with self.state.transaction() as db:
            db["reservations"].upsert({  # type: ignore[union-attr]
                "name": name, "lpj_job_id": lpj.job_id, "user": lpj.user,
                "nodes": list(res.nodes), "expected_start": snap.now, "weighted_spread": None,
                "source": "adopted", "created_at": snap.now, "state": "active",
                "lpj_held": 0, "released_at": None, "release_reason": None}, pk="name")
        self.actions.append(f"adopted {name} (made by a run that stopped before recording it)")

    def _admitted_at(self, job_id: int, name: str) -> float | None:
        rows = list(self.state.db.table("admissions").rows_where(
            "job_id = ? and reservation = ? and decision = 'admit'", [job_id, name], limit=1))
        return float(rows[0]["decided_at"]) if rows else None

    def listing(self) -> list[dict[str, Any]]:
        """Our reservations as Slurm and the database know them (``arnold reserve list``)."""
        from reservations.binder import bindings_of

        snap = Snapshot.read(self.slurm, self.config)
        rows = {r["name"]: r for r in self.state.db.table("reservations").rows_where(
            "state != 'released'")}
        moves = bindings_of(self.state, [lpj_of(n) or 0 for n in
                                         set(rows) | set(snap.reservations)])
        out = []
        for name in sorted(set(rows) | {n for n in snap.reservations if lpj_of(n)}):
            res = snap.reservations.get(name)
            row = rows.get(name, {})
            lpj = snap.jobs.get(lpj_of(name) or -1)
            out.append({
                "name": name, "lpj_job_id": lpj_of(name),
                "lpj_state": lpj.state if lpj else "gone",
                "user": row.get("user") or (lpj.user if lpj else None),
                "nodes": list(res.nodes) if res else _json_list(row.get("nodes")),
                "expected_start": row.get("expected_start"),
                "weighted_spread": row.get("weighted_spread"),
                "state": row.get("state", "not recorded"),
                "reserved_idle_node_h": round(float(row.get("idle_node_s") or 0.0) / 3600, 4),
                "in_slurm": res is not None,
                "admitted": sorted(j.job_id for j in snap.jobs.values()
                                   if j.reservation == name and j.job_id != lpj_of(name)),
                "repairs": [{"kind": m["kind"], "reason": m["reason"],
                             "decided_at": m["decided_at"],
                             "previous": _json_list(m["previous"]),
                             "nodes": _json_list(m["nodes"])}
                            for m in moves.get(lpj_of(name) or 0, [])],
            })
        return out


def _by_priority(jobs: Iterable[JobInfo]) -> list[JobInfo]:
    return sorted(jobs, key=queue_order)


def _hostlist(nodes: Sequence[str]) -> str:
    return str(hostlist.collect_hostlist(list(nodes)))


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _json_list(value: Any) -> list[str]:
    if isinstance(value, str):
        return list(json.loads(value))
    return list(value or [])

