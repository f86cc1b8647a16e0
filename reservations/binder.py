"""Placements that follow the job: every waiting job arnold-sbatch placed is kept on nodes it
can use, and moved to nodes that are free now when its own are not.

arnold-sbatch never refuses a job for busy nodes: it plans it on the nodes that drain first
(``slurm_arnold.snapshot.wait_plan.plan_nodes``), submits it with those as its required nodes
(``-w``), so it keeps its place in Slurm's queue and Slurm's backfill plans around it, and
leaves its spec (``slurm_arnold.submit.spec``). Each ``arnold reserve sync`` pass then, for
every such job still pending, in Slurm's priority order:

* **binds** it to nodes free now when its planned ones are not all free but enough others
  are (placement solved on the free nodes): the job starts at once, as it would have under
  plain sbatch; it waits at most one loop period longer;
* **repairs** its plan when a planned node became unusable (DRAIN, even while still running a
  job; DOWN, NOT_RESPONDING, FAIL; a maintenance reservation the user may not use; out of the
  partition; not nodes held for a large job ahead of it, which it waits for as it would for
  nodes running that job): the lost nodes are replaced by the nearest spares (same leaf,
  then minipod, then the ones that drain first; the way Kueue's topology-aware scheduling
  replaces a failed node) and the mapping solved on the new set, or the job is planned
  afresh when that costs less by the reservation policy's measure (expected wait +
  ``spread_weight_h`` x weighted spread).
* **replans** it when its planned nodes now drain clearly later than others would (a job on
  them outran its prediction or had its limit raised): planned afresh, and moved when that
  beats its plan by ``reservation.replan_gain_min`` of the same measure.

Each of these moves rewrites, in the same pass, the job's required nodes, its ``arnold_<id>``
reservation when it has one (reservation first: Slurm wants a bound job's nodes inside it), and
its rank file, which goes to ``<state_dir>/rankorder/<job id>.rankorder`` (the admin side's
directory; the SPANK plugin, given ``rankdir=`` in plugstack.conf, prefers it to the user's
file). Every decision is a row of ``bindings`` (``arnold jobs``, ``arnold reserve list``).

The pass holds the site-wide submit lock while it reads, decides and rewrites, so no
submission is given the nodes it is moving a job onto.
"""

from __future__ import annotations

import logging
import math
import pwd
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass

from predictor.live import LivePredictor
from reservations.records import Records
from site_config import SiteConfig
from slurm_arnold.errors import ArnoldError, InfeasibleError, SlurmError
from slurm_arnold.placement import Placement, place
from slurm_arnold.placement.weights import TierWeight
from slurm_arnold.placement.weights import resolve as resolve_weights
from slurm_arnold.rankorder import write_files
from slurm_arnold.site_state import SITE_DIR_MODE, admin_rankdir, make_dir
from slurm_arnold.slurm import JobInfo, Slurm
from slurm_arnold.snapshot.queue import (
    ALIVE,
    FINISHED,
    by_priority,
    lpj_of,
    queue_order,
    reservation_name,
    taken_by_queue,
)
from slurm_arnold.snapshot.snapshot import Snapshot
from slurm_arnold.snapshot.view import (
    ClusterView,
    free_nodes,
    hostlist_text,
    narrow_free,
    reserved_for_others,
)
from slurm_arnold.snapshot.wait_plan import plan_nodes
from slurm_arnold.state import StateDB
from slurm_arnold.submit.spec import BadSpec, JobSpec, read_spec
from slurm_arnold.topology import Topology

log = logging.getLogger(__name__)
#: A rank file of a finished job is removed this long after it left the queue.
RANKFILE_GRACE_S = 600.0


@dataclass
class Move:
    """One decision: the job's new nodes and placement, and why."""

    kind: str  # "bind", "repair" or "replan"
    reason: str
    placement: Placement
    expected_start: float


class Binder:
    """One pass over the waiting jobs (see the module docstring)."""

    def __init__(self, config: SiteConfig, state: StateDB, slurm: Slurm,
                 time_limit: float | None = None) -> None:
        self.config = config
        self.state = state
        self.slurm = slurm
        self.time_limit = time_limit
        self.actions: list[str] = []

    def weights(self, topology: Topology, spec: JobSpec) -> dict[str, TierWeight]:
        """The job's tier weights as arnold-sbatch used them: the site's, then the user's
        (``--tier-weight``, kept in the spec); the site's alone, with a warning, where the
        user's no longer fit the topology (a tier renamed since the submit)."""
        network, site = self.config.network, self.config.tier_weights
        try:
            return resolve_weights(topology, spec.alpha, network, site=site,
                                   user=spec.tier_weights)
        except ArnoldError as exc:
            log.warning("job %d: its --tier-weight no longer applies (%s); the site's weights "
                        "are used", spec.job_id, exc)
            return resolve_weights(topology, spec.alpha, network, site=site)

    def run(self, snap: Snapshot, predictor: LivePredictor) -> list[str]:
        """Bind or repair every waiting arnold job that needs it; the actions taken."""
        taken = taken_by_queue(list(snap.jobs.values()))
        # Nodes a waiting job names (-w), this pass's moves included: never another's plan.
        named = {n for j in snap.jobs.values() if j.state == "PENDING"
                 for n in j.required_nodes}
        for job in by_priority(snap.jobs.values()):
            if job.state != "PENDING" or not job.required_nodes or job.held:
                continue
            spec = self._spec(job)
            if spec is None:
                continue
            try:
                move = self._decide(snap, predictor, job, spec, taken, named)
            except (InfeasibleError, ArnoldError) as exc:
                log.info("job %d: %s", job.job_id, exc)
                continue
            if move is None:
                continue
            try:
                self._apply(snap, job, spec, move)
            except SlurmError as exc:
                self.actions.append(f"job {job.job_id}: could not {move.kind} ({exc}); "
                                    "the next sync tries again")
                continue
            taken |= set(move.placement.nodes())
            named |= set(move.placement.nodes())
        self._clean(snap)
        return self.actions

    # -- deciding -------------------------------------------------------------------------
    def _spec(self, job: JobInfo) -> JobSpec | None:
        try:
            uid = pwd.getpwnam(job.user).pw_uid
        except KeyError:
            return None
        try:
            return read_spec(self.config, job.user, uid, job.job_id, job.node_count or None)
        except BadSpec as exc:
            log.warning("job %d: %s; left as it is", job.job_id, exc)
            return None

    def usable_for(self, snap: Snapshot, job: JobInfo, spec: JobSpec,
                   waiting_for: Iterable[str] = ()) -> set[str]:
        """Nodes in service that this job may use (partition, reservations, -x/-w/-C); the
        reservations ``waiting_for`` are left out, as if already gone."""
        own = reservation_name(job.job_id)
        part = spec.partition or snap.view.partition
        skip = {own, *waiting_for, *_ending(snap)}
        # Its own reservation moves with it; any other holds nodes it cannot run on unless
        # it names that one (then it runs only there).
        blocked, only = reserved_for_others(
            [r for r in snap.reservations.values() if r.name not in skip], job.user,
            _named(job, own))
        out = set(snap.usable(part)) - blocked
        if only is not None:
            out &= only
        view = ClusterView(snap.view.topology, snap.view.nodes, out, part)
        return narrow_free(view, spec.narrowing(), set())

    def _decide(self, snap: Snapshot, predictor: LivePredictor, job: JobInfo, spec: JobSpec,
                taken: set[str], named: set[str]) -> Move | None:
        current = set(job.required_nodes)
        own = reservation_name(job.job_id)
        usable = self.usable_for(snap, job, spec)
        others = taken - current
        # Free now for this job: idle, usable, and nobody else's pending job names them.
        ending = _ending(snap)
        idle = free_nodes(snap.view.topology, snap.view.nodes.values(),
                          [r for r in snap.reservations.values()
                           if r.name != own and r.name not in ending],
                          partition=spec.partition or snap.view.partition, user=job.user,
                          reservation=_named(job, own))
        free = (idle & usable) - others
        # Nodes held for a large job ahead of this one are busy until it ends (its
        # reservation goes with it), as nodes running a job are: not lost.
        ahead = _reserved_ahead(snap, job)
        lost = sorted(current - (self.usable_for(snap, job, spec, ahead) if ahead else usable))
        if not current <= free and len(free) >= spec.shape.nodes:
            placement = place(snap.view.topology, free, spec.shape, algo=spec.algo,
                              alpha=spec.alpha, time_limit=self.time_limit,
                              weights=self.weights(snap.view.topology, spec))
            kept = self._keep_planned(snap, job, spec, free) if lost else None
            # A job that lost a node (a requeued one above all: its survivors may hold its
            # caches) keeps its other nodes when that costs no spread.
            if kept is not None and \
                    kept.placement.metrics.weighted_spread <= placement.metrics.weighted_spread:
                return kept
            return Move("bind", f"{len(free)} suitable nodes free now"
                        + (f", {hostlist_text(lost)} unusable" if lost else
                           "; its planned nodes were still busy"), placement, snap.now)
        if not lost:
            return self._replan(snap, predictor, job, spec, usable - (named - current))
        return self._repair(snap, predictor, job, spec, usable - others, lost, usable)

    def _replan(self, snap: Snapshot, predictor: LivePredictor, job: JobInfo, spec: JobSpec,
                pool: set[str]) -> Move | None:
        """Plan the job afresh when its planned nodes now drain clearly later than others
        would (a job on them outran its prediction or had its limit raised; jobs elsewhere
        ended early): Slurm's own plans follow such changes every backfill pass, and a fixed
        nodelist would lose that. Not while jobs admitted into its reservation are alive:
        they were let in on the nodes it has."""
        own = reservation_name(job.job_id)
        if any(j.reservation == own and j.job_id != job.job_id and j.state in ALIVE
               for j in snap.jobs.values()):
            return None
        gain_s = self.config.reservation.replan_gain_min * 60
        drain = snap.drain(predictor)
        current = max([snap.now, *(drain.get(n, snap.now) for n in job.required_nodes)])
        # Cheap bound first: no nodes at all drain soon enough to win on the start.
        when = sorted(max(snap.now, drain.get(n, snap.now)) for n in pool)
        if len(when) < spec.shape.nodes or when[spec.shape.nodes - 1] >= current - gain_s:
            return None
        weight = self.config.reservation.spread_weight_h
        choice = plan_nodes(snap, predictor, spec.shape, horizon_s=math.inf, own=own,
                            spread_weight_h=weight, alpha=spec.alpha,
                            time_limit=self.time_limit, allowed=pool,
                            reserving_for=job if own in snap.reservations else None)
        if choice is None or not set(choice.nodes) <= pool:
            return None
        topo = snap.view.topology
        kept = place(topo, job.required_nodes, spec.shape, algo=spec.algo, alpha=spec.alpha,
                     time_limit=self.time_limit, weights=self.weights(topo, spec))
        if _cost(choice.expected_start, snap.now, choice.placement, weight) >= \
                _cost(current, snap.now, kept, weight) - gain_s / 3600:
            return None
        return Move("replan", f"its planned nodes drain in {_minutes(current - snap.now)}, "
                    f"these in {_minutes(choice.expected_start - snap.now)}",
                    choice.placement, choice.expected_start)

    def _repair(self, snap: Snapshot, predictor: LivePredictor, job: JobInfo, spec: JobSpec,
                pool: set[str], lost: list[str], usable: set[str]) -> Move:
        """Replace the job's ``lost`` nodes: by the spares in ``pool`` (idle, named by no
        other job) nearest to them, or by a fresh plan among the nodes it may use at all
        (``usable``), busy ones by when they drain; the cheaper of the two."""
        drain = snap.drain(predictor)
        topo = snap.view.topology
        good = [n for n in job.required_nodes if n not in set(lost)]
        chosen = _nearest(topo, lost, pool - set(job.required_nodes), drain, snap.now)
        weight = self.config.reservation.spread_weight_h
        options: list[tuple[float, Move]] = []
        if len(chosen) == len(lost):
            nodes = good + chosen
            try:
                placement = place(topo, nodes, spec.shape, algo=spec.algo, alpha=spec.alpha,
                                  time_limit=self.time_limit, weights=self.weights(topo, spec))
                start = max([snap.now, *(drain.get(n, snap.now) for n in nodes)])
                options.append((_cost(start, snap.now, placement, weight), Move(
                    "repair",
                    f"{hostlist_text(lost)} unusable: replaced by {hostlist_text(chosen)}",
                    placement, start)))
            except InfeasibleError as exc:
                log.info("job %d: the nearest spares do not fit its shape (%s)", job.job_id,
                         exc)
        own = reservation_name(job.job_id)
        try:
            # A reservation moved with the job holds its new nodes from now on.
            choice = plan_nodes(snap, predictor, spec.shape, horizon_s=math.inf, own=own,
                                spread_weight_h=weight, alpha=spec.alpha,
                                time_limit=self.time_limit, allowed=usable,
                                reserving_for=job if own in snap.reservations else None)
        except InfeasibleError as exc:
            log.info("job %d: no fresh plan within the nodes it may use (%s)", job.job_id, exc)
            choice = None
        if choice is not None and set(choice.nodes) <= usable:  # so none of the lost ones
            options.append((_cost(choice.expected_start, snap.now, choice.placement, weight),
                            Move("repair", f"{hostlist_text(lost)} unusable: planned afresh",
                                 choice.placement, choice.expected_start)))
        if not options:
            raise InfeasibleError(f"{hostlist_text(lost)} unusable and no spare fits; it waits")
        # Ties go to the replacement, which keeps the most of the plan.
        return min(options, key=lambda o: o[0])[1]

    def _keep_planned(self, snap: Snapshot, job: JobInfo, spec: JobSpec,
                      free: set[str]) -> Move | None:
        """The job's planned nodes that are free now, plus the free spares nearest to those
        that are not; None when that set does not fit its shape."""
        kept = [n for n in job.required_nodes if n in free]
        gone = [n for n in job.required_nodes if n not in free]
        chosen = _nearest(snap.view.topology, gone, free - set(job.required_nodes), {},
                          snap.now)
        if len(chosen) < len(gone):
            return None
        try:
            placement = place(snap.view.topology, kept + chosen, spec.shape, algo=spec.algo,
                              alpha=spec.alpha, time_limit=self.time_limit,
                              weights=self.weights(snap.view.topology, spec))
        except InfeasibleError:
            return None
        return Move("repair", f"{hostlist_text(gone)} unusable or taken: replaced by "
                    f"{hostlist_text(chosen)}, free now", placement, snap.now)

    # -- applying -------------------------------------------------------------------------
    def _apply(self, snap: Snapshot, job: JobInfo, spec: JobSpec, move: Move) -> None:
        nodes = move.placement.nodes()
        directory = admin_rankdir(self.config)
        make_dir(directory, SITE_DIR_MODE)
        placement_id = secrets.token_hex(8)
        rankfile, _ = write_files(directory, move.placement, placement_id, spec.rank_order,
                                  stem=str(job.job_id), parallelism=spec.parallelism)
        name = reservation_name(job.job_id)
        if name in snap.reservations:
            self.slurm.update_reservation(name, Nodes=hostlist_text(nodes))
        self.slurm.update_job(job.job_id, ReqNodeList=hostlist_text(nodes))
        before = sorted(job.required_nodes)
        Records(self.state).binding(
            job.job_id, job.user, move.kind, move.reason, nodes, before,
            weighted_spread=move.placement.metrics.weighted_spread, previous_spread=None,
            expected_start=move.expected_start, now=snap.now, rankfile=str(rankfile),
            reservation=name if name in snap.reservations else None)
        verb = {"bind": "bound", "repair": "repaired", "replan": "replanned"}[move.kind]
        self.actions.append(f"{verb} job {job.job_id} on {hostlist_text(nodes)} ({move.reason}; "
                            f"weighted spread {move.placement.metrics.weighted_spread:.2f})")

    def _clean(self, snap: Snapshot) -> None:
        """Rank files of jobs that left the queue a while ago."""
        directory = admin_rankdir(self.config)
        if not directory.is_dir():
            return
        for path in directory.iterdir():
            stem = path.name.split(".")[0]
            if not stem.isdigit():
                continue
            job = snap.jobs.get(int(stem))
            if job is not None and job.state not in FINISHED:
                continue
            try:
                if time.time() - path.stat().st_mtime > RANKFILE_GRACE_S:
                    path.unlink()
            except FileNotFoundError:
                pass


def _ending(snap: Snapshot) -> set[str]:
    """Our reservations whose large job has ended or gone: the same pass deletes them
    (``reservations.sync``, step 1), so their nodes are not lost to anyone (a job planned
    there was repaired away from nodes about to be free)."""
    ending = set()
    for name in snap.reservations:
        lpj_id = lpj_of(name)
        if lpj_id is None:
            continue
        lpj = snap.jobs.get(lpj_id)
        if lpj is None or lpj.state not in ALIVE:
            ending.add(name)
    return ending


def _reserved_ahead(snap: Snapshot, job: JobInfo) -> list[str]:
    """Our reservations whose large job is ahead of ``job``: running, or waiting before it
    in Slurm's queue."""
    mine = queue_order(job)
    ahead = []
    for name in snap.reservations:
        lpj = snap.jobs.get(lpj_of(name) or -1)
        if lpj is None or lpj.job_id == job.job_id or lpj.state not in ALIVE:
            continue
        if lpj.state != "PENDING" or queue_order(lpj) < mine:
            ahead.append(name)
    return ahead


def _named(job: JobInfo, own: str) -> str | None:
    """The reservation ``job`` names other than its own ``arnold_<id>``, if any."""
    return job.reservation if job.reservation and job.reservation != own else None


def _nearest(topology: Topology, lost: Iterable[str], spares: Iterable[str],
             drain: dict[str, float], now: float) -> list[str]:
    """For each lost node in turn the nearest unused spare (same leaf, then minipod; ties to
    the one that drains first): as many as there are spares."""
    left = sorted(spares)
    chosen: list[str] = []
    for node in lost:
        if not left:
            break
        best = min(left, key=lambda s: (_distance(topology, node, s), drain.get(s, now), s))
        chosen.append(best)
        left.remove(best)
    return chosen


def _distance(topology: Topology, a: str, b: str) -> int:
    if topology.leaf_of(a) == topology.leaf_of(b):
        return 0
    if topology.minipod_of(a) == topology.minipod_of(b):
        return 1
    return 2


def _cost(start: float, now: float, placement: Placement, weight_h: float) -> float:
    return max(0.0, start - now) / 3600 + weight_h * placement.metrics.weighted_spread


def _minutes(seconds: float) -> str:
    return f"{max(0.0, seconds) / 60:.0f} min"

