"""The discrete-event replay itself (``Simulation``): events, backfill passes, reservations and
admissions, as the package docstring describes the two policies."""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from reservations.policy import admits, choose_reservation, expected_end, shrunk_limit
from slurm_arnold.errors import InfeasibleError
from slurm_arnold.placement import JobShape
from slurm_arnold.placement.engine import place_from_node_list
from slurm_arnold.sim.cluster import SimCluster
from slurm_arnold.sim.jobs import SimJob, Workload
from slurm_arnold.sim.memo import PlacementMemo
from slurm_arnold.sim.metrics import job_metrics, prediction_accuracy
from slurm_arnold.sim.plans import BackfillPlan, Reservation
from slurm_arnold.sim.predictors import OnlinePredictor
from slurm_arnold.sim.settings import CHOICES, SimSettings

END, SUBMIT = 0, 1


class Simulation:
    """One replay. ``run()`` returns the metrics object of ``arnold sim --json``."""

    def __init__(self, cluster: SimCluster, workload: Workload, settings: SimSettings,
                 progress: Callable[[int], None] | None = None) -> None:
        if settings.policy not in ("slurm", "arnold"):
            raise InfeasibleError(f"unknown policy {settings.policy!r}; use slurm or arnold")
        for key, choices in CHOICES.items():
            value = getattr(settings, key)
            if value not in choices:
                raise InfeasibleError(f"unknown {key} {value!r}; use " + ", ".join(choices))
        self.c = cluster
        self.w = workload
        self.s = settings
        self.jobs = workload.jobs
        self.pred = OnlinePredictor(settings.predictor, quantile=settings.quantile)
        self.progress = progress
        self.now = 0.0
        self.queue: list[SimJob] = []
        self.running: dict[int, SimJob] = {}
        self.node_jobs: list[set[int]] = [set() for _ in range(cluster.n)]
        self.limit_end = np.zeros(cluster.n)  # latest end by time limit of a node's jobs
        self.nonadmitted_free = np.zeros(cluster.n)  # last time a non-admitted job left it
        self.reservations: dict[int, Reservation] = {}
        self.res_of_job: dict[int, int] = {}
        self.next_rid = 0
        self.events: list[tuple[float, int, int, int]] = []
        self.seq = 0
        self.log: list[tuple[int, tuple[int, ...], int, float, float]] = []
        self.backfilled_in_reservations = 0
        # Reserved nodes running nothing, integrated over time: what reservations cost others.
        self.jobs_on_node = np.zeros(cluster.n, dtype=np.int64)
        self.reserved_idle_s = 0.0
        self.idle_reserved_now = 0
        self.killed = 0
        self.lpj_delay = 0.0
        self.lpj_admission_delay = 0.0
        self.replans = 0
        self._gate_drain: np.ndarray | None = None
        self._drains: dict[bool, np.ndarray] = {}  # this instant's drains until a job moves
        self.user_active: dict[str, int] = {}
        self.memo = PlacementMemo(cluster.topology, algo=settings.placement, alpha=settings.alpha,
                                  time_limit=settings.placement_time_limit)
        cluster.keep_domains_whole = settings.policy == "arnold" and settings.keep_domains_whole
        # Whole free NVLink domains, integrated over time (what small jobs leave to large ones).
        self.whole_domain_s = 0.0
        self.whole_domains_now = 0

    # -- events ---------------------------------------------------------------------------
    def _push(self, t: float, kind: int, job: SimJob) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, job.index))

    def run(self) -> dict[str, Any]:
        """Replay every job; return the metrics."""
        for job in self.jobs:
            self._push(job.submit, SUBMIT, job)
        done = 0
        while self.events:
            t = self.events[0][0]
            self.reserved_idle_s += (t - self.now) * self.idle_reserved_now
            self.whole_domain_s += (t - self.now) * self.whole_domains_now
            self.now = t
            while self.events and self.events[0][0] == t:
                _, kind, _, index = heapq.heappop(self.events)
                job = self.jobs[index]
                if kind == END:
                    self._end(job)
                    done += 1
                    if self.progress:
                        self.progress(1)
                else:
                    self._submit(job)
            self._pass()
            self.idle_reserved_now = self._idle_reserved()
            if self.c.n_domains:
                self.whole_domains_now = self.c.whole_domains()
        unfinished = [j for j in self.jobs if j.end is None]
        if unfinished:  # pragma: no cover - a bug, not an outcome
            raise AssertionError(f"{len(unfinished)} jobs never ran (first {unfinished[0]})")
        return self.metrics()

    def _idle_reserved(self) -> int:
        """Nodes of any reservation that run no job at this instant."""
        if not self.reservations:
            return 0
        nodes = np.unique(np.concatenate([r.nodes for r in self.reservations.values()]))
        return int(np.count_nonzero(self.jobs_on_node[nodes] == 0))

    def _submit(self, job: SimJob) -> None:
        active = len(self.queue) + len(self.running)
        user_running = [(float(r.start or 0.0), r.record.time_limit)
                        for r in self.running.values() if r.user == job.user] \
            if self.pred.learns else []
        self.pred.observe_submit(job, user_active=self.user_active.get(job.user, 0),
                                 active=active, running=len(self.running),
                                 user_running=user_running)
        self.user_active[job.user] = self.user_active.get(job.user, 0) + 1
        self.queue.append(job)

    def _end(self, job: SimJob) -> None:
        self._drains.clear()
        del self.running[job.index]
        self.c.give(job.node_ids, job.gpus_each)
        self.jobs_on_node[job.node_ids] -= 1
        for i in job.node_ids:
            self.node_jobs[i].discard(job.index)
            self.limit_end[i] = max((self._limit_end(self.jobs[k]) for k in self.node_jobs[i]),
                                    default=0.0)
            if job.admitted_to is None:
                self.nonadmitted_free[i] = self.now
        self.user_active[job.user] -= 1
        self.pred.observe_end(job)
        self.pred.forget(job)

    @staticmethod
    def _limit_end(job: SimJob) -> float:
        assert job.start is not None
        return job.start + job.limit

    # -- starting jobs --------------------------------------------------------------------
    def _start(self, job: SimJob, nodes: Sequence[int], *, limit: float | None = None,
               admitted_to: int | None = None) -> None:
        self._drains.clear()
        gpus_each = self.c.g if job.nodes else job.gpus
        self.c.take(nodes, gpus_each)
        job.node_ids = list(nodes)
        job.gpus_each = gpus_each
        job.start = self.now
        job.admitted_to = admitted_to
        job.predicted = self.pred.predict(job)
        run = job.runtime
        if limit is not None and limit < job.runtime:
            run, job.killed = limit, True
            self.killed += 1
        if limit is not None:
            job.limit = limit
        job.end = self.now + run
        self.running[job.index] = job
        self.jobs_on_node[list(nodes)] += 1
        for i in nodes:
            self.node_jobs[i].add(job.index)
            self.limit_end[i] = max(self.limit_end[i], self.now + job.limit)
        self.queue.remove(job)
        self.log.append((job.index, tuple(nodes), gpus_each, job.start, job.end))
        self._push(job.end, END, job)

    def _candidates(self, job: SimJob) -> np.ndarray:
        """Nodes this job could use now, ignoring plans and reservations."""
        if job.nodes:
            return self.c.whole_free()
        mask: np.ndarray = self.c.free_gpus >= job.gpus
        return mask

    def _choose(self, job: SimJob, mask: np.ndarray) -> list[int] | None:
        if job.nodes:
            return self.c.tree_fit(mask, job.nodes)
        i = self.c.best_fit_node(mask, job.gpus)
        return None if i is None else [i]

    # -- the scheduling pass --------------------------------------------------------------
    def _pass(self) -> None:
        self._gate_drain = None
        self._drains.clear()
        self.pred.maybe_retrain(self.now)
        binding = (self.s.lpj_keeps_place or self.s.lpjs_respect_lpj_plans
                   or math.isfinite(self.s.lpj_starved_h) or self.s.lpj_jumps_pay != "off"
                   or self.s.lpj_starved_past_plan
                   or self.s.lpj_head_binds or self.s.lpj_head_shadow != "off")
        if self.s.policy == "arnold":
            self._start_drained_reservations()
            if not binding:
                # With a rule that binds LPJs to plans, a reservation is replanned at its
                # LPJ's turn instead, outside the nodes planned for the LPJs ahead: here it
                # could move onto them, as the rule forbids a new reservation to do.
                self._replan_reservations()
        plans: list[BackfillPlan] = []
        blocked_jobs: list[SimJob] = []  # cannot start; planned lazily
        planned_upto = 0
        free_whole = int(np.count_nonzero(self.c.whole_free() & ~self.c.blocked))
        free_gpus = int(self.c.free_gpus[~self.c.blocked].sum())
        reserved_idle = bool(self.reservations) and bool(
            (self.c.blocked & (self.c.free_gpus > 0)).any())

        def plans_ahead() -> list[BackfillPlan]:
            """Backfill's plans for the jobs ahead that could not start (made lazily: most
            passes on a full cluster never need them)."""
            nonlocal planned_upto
            while planned_upto < len(blocked_jobs) and len(plans) < self.s.plan_ahead:
                plan = self._plan(blocked_jobs[planned_upto], plans)
                planned_upto += 1
                if plan is not None:
                    plans.append(plan)
            return plans

        for job in list(self.queue[: self.s.depth]):
            if self.s.policy == "arnold" and job.lpj:
                # An LPJ waiting without a reservation (not imminent, or not worth one) is
                # planned like any blocked job; once it has waited lpj_starved_h (off by
                # default), an LPJ behind it may not take its planned nodes, where it could
                # wait for ever behind a stream of smaller LPJs (Curie's 4,500-node job: days).
                # With lpj_keeps_place, like any backfilled job it may not take nodes
                # planned for any job ahead of it, now or by a reservation.
                ahead = np.zeros(self.c.n, dtype=bool)
                overlap = np.zeros(self.c.n, dtype=bool)
                # Only when some plan can bind it: plans are made lazily, and one made
                # before this LPJ starts would go stale under it.
                own_turn: float | None = None
                head = True  # the first LPJ plan ahead is the LPJs' head of the queue
                for p in plans_ahead() if binding else ():
                    if p.lpj and head and self.s.lpj_head_shadow != "off":
                        head = False
                        shadow, shielded = self._shadow(int(p.mask.sum()))
                        ahead |= shielded
                        runs = (job.limit if self.s.lpj_head_shadow == "limits"
                                else min(job.limit, self.pred.predict(job)))
                        if self.now + runs > shadow:
                            overlap |= shielded
                        continue
                    binds = (p.starved or self.s.lpj_keeps_place
                             or (p.lpj and self.s.lpjs_respect_lpj_plans)
                             or (p.lpj and head and self.s.lpj_head_binds))
                    head = head and not p.lpj
                    if not binds and p.lpj and self.s.lpj_jumps_pay != "off":
                        if own_turn is None:
                            mine = self._plan(job, plans)
                            own_turn = mine.start if mine is not None else math.inf
                        binds = not self._jump_pays(job, p, own_turn)
                    if not binds:
                        continue
                    ahead |= p.mask
                    if self.now + job.limit > p.start:
                        overlap |= p.mask
                if self._start_lpj_now(job, overlap):
                    free_whole = int(np.count_nonzero(self.c.whole_free() & ~self.c.blocked))
                    free_gpus = int(self.c.free_gpus[~self.c.blocked].sum())
                    continue
                if job.index in self.res_of_job:
                    if not binding or self._replan(
                            self.reservations[self.res_of_job[job.index]], self._drain(),
                            ahead, plans):
                        continue
                    # Moving it failed: it waits, planned, as Slurm would have it wait.
                    blocked_jobs.append(job)
                    continue
                if len(self.reservations) < self.s.max_reservations and self._reserve(
                        job, ahead, plans):
                    free_whole = int(np.count_nonzero(self.c.whole_free() & ~self.c.blocked))
                    free_gpus = int(self.c.free_gpus[~self.c.blocked].sum())
                    reserved_idle = True
                    continue
                # No reservation to be had now: it waits as Slurm would have it wait.
                blocked_jobs.append(job)
                continue
            fits_somewhere = (job.nodes <= free_whole) if job.nodes else (job.gpus <= free_gpus)
            if fits_somewhere:
                mask = self._candidates(job) & ~self.c.blocked
                for p in plans_ahead():
                    if self.now + job.limit > p.start:
                        mask &= ~p.mask
                nodes = self._choose(job, mask)
                if nodes is not None:
                    self._start(job, nodes)
                    free_whole = int(np.count_nonzero(self.c.whole_free() & ~self.c.blocked))
                    free_gpus = int(self.c.free_gpus[~self.c.blocked].sum())
                    continue
            if reserved_idle and self._admit(job):
                continue
            if job.nodes:
                blocked_jobs.append(job)

    def _jump_pays(self, job: SimJob, blocked: BackfillPlan, own_turn: float) -> bool:
        """Whether LPJ ``job`` may take ``blocked``'s planned nodes (``lpj_jumps_pay``): the
        node-hours it saves itself against waiting for its turn (``own_turn``, its plan
        behind the jobs ahead) are at least those it may delay the blocked LPJ."""
        def past_start(runs: float) -> float:
            return max(0.0, self.now + runs - blocked.start)

        cost = self.s.lpj_jumps_pay
        by_limit = past_start(job.limit)
        by_prediction = past_start(min(job.limit, self.pred.predict(job)))
        delay = {"limits": by_limit, "predictions": by_prediction,
                 # The upper prediction holds with odds `quantile`; past it the job may run
                 # to its limit: the expected delay is at most this mix of the two.
                 "expected": (self.s.quantile * by_prediction
                              + (1.0 - self.s.quantile) * by_limit)}[cost]
        saved = job.nodes * (own_turn - self.now)
        return saved >= int(blocked.mask.sum()) * delay

    def _shadow(self, n: int) -> tuple[float, np.ndarray]:
        """When ``n`` nodes are predicted to be free (reserved ones once their LPJ has run
        its predicted time), and which n to keep for that (``lpj_head_shadow_nodes``):
        busy-first keeps those busy until then before idle ones, so that idle nodes the head
        will not need stay open to others; tree-fit keeps Slurm's tree-fit choice among
        all that drain by then."""
        drain = np.maximum(self._drain(), self.now)
        avail = drain.copy()
        for res in self.reservations.values():
            avail[res.nodes] = (self._expected_start(res, drain)
                                + min(res.job.limit, self.pred.predict(res.job)))
        start = float(np.sort(avail)[n - 1])
        shielded = np.zeros(self.c.n, dtype=bool)
        if self.s.lpj_head_shadow_nodes == "tree-fit":
            shielded[self.c.tree_fit(avail <= start, n) or []] = True
            return start, shielded
        idle = self.c.whole_free() & ~self.c.blocked
        order = np.lexsort((avail, idle, avail > start))
        shielded[order[:n]] = True
        return start, shielded

    def _plan(self, job: SimJob, plans: Sequence[BackfillPlan]) -> BackfillPlan | None:
        """Backfill's planned start: when enough nodes are free if jobs run to their limits."""
        avail = np.where(self.c.whole_free(), self.now, np.maximum(self.limit_end, self.now))
        if self.s.plans_past_reservations:
            for res in self.reservations.values():
                # Its LPJ starts when the nodes drain by their limits and runs to its own.
                avail[res.nodes] = (max(self.now, float(self.limit_end[res.nodes].max()))
                                    + res.job.limit)
        else:
            avail = np.where(self.c.blocked, np.inf, avail)
        for p in plans:
            avail = np.where(p.mask, np.maximum(avail, p.end), avail)
        finite = np.sort(avail[np.isfinite(avail)])
        if len(finite) < job.nodes:
            return None
        start = float(finite[job.nodes - 1])
        nodes = self.c.tree_fit(avail <= start, job.nodes)
        if nodes is None:  # pragma: no cover - the count above guarantees a fit
            return None
        mask = np.zeros(self.c.n, dtype=bool)
        mask[nodes] = True
        if job.lpj and job.first_plan is None:
            job.first_plan = start
        first = job.first_plan if job.first_plan is not None else start
        starved = job.lpj and (self.now - job.submit >= self.s.lpj_starved_h * 3600
                               or (self.s.lpj_starved_past_plan and self.now >= first))
        return BackfillPlan(start, start + job.limit, mask, starved=starved, lpj=job.lpj)

    # -- Arnold's reservations ------------------------------------------------------------
    def _shape(self, job: SimJob) -> JobShape:
        pp, dp = job.layout()
        return JobShape(self.c.g, pp, dp, self.c.g)

    def _start_lpj_now(self, job: SimJob, planned: np.ndarray) -> bool:
        """Start an LPJ at once when enough nodes are free (its own reserved ones included,
        ``planned`` ones, held for the jobs ahead, not), unless waiting for its reservation
        is cheaper by the policy's rule."""
        res = self.reservations.get(self.res_of_job.get(job.index, -1))
        pool = self.c.whole_free() & ~self.c.blocked & ~planned
        if res is not None:
            own = np.zeros(self.c.n, dtype=bool)
            own[res.nodes] = True
            pool |= own & self.c.whole_free()
        count = int(pool.sum())
        if count < job.nodes or (res is not None and count <= res.declined_at):
            return False
        names = [self.c.names[i] for i in np.flatnonzero(pool)]
        placement = self.memo.place(names, self._shape(job))
        if res is not None:
            wait_h = (self._expected_start(res, self._drain(admitted=False)) - self.now) / 3600.0
            if (self.s.spread_weight_h * placement.metrics.weighted_spread
                    > wait_h + self.s.spread_weight_h * res.spread):
                res.declined_at = count
                return False
            self._release(res)
        job.weighted_spread = placement.metrics.weighted_spread
        self._start(job, [self.c.index[n] for n in placement.nodes()])
        return True

    def _release(self, res: Reservation) -> None:
        # Jobs admitted into it that still run are ordinary jobs from now on: a later
        # reservation on their nodes must wait for them like for any other job.
        for index in res.admitted:
            if index in self.running:
                self.running[index].admitted_to = None
        self.c.blocked[res.nodes] = False
        self._gate_drain = None
        self._drains.clear()
        del self.reservations[res.rid]
        del self.res_of_job[res.job.index]

    def _drain(self, *, admitted: bool = True) -> np.ndarray:
        """Each node's predicted drain time (0 when idle); ``admitted=False`` leaves out jobs
        admitted into reservations, whose ends must not push an LPJ's expected start later
        (else each admission would stretch the window for the next)."""
        cached = self._drains.get(admitted)
        if cached is not None:
            return cached
        drain = np.zeros(self.c.n)
        nodes: list[int] = []
        ends: list[float] = []
        for job in self.running.values():
            if not admitted and job.admitted_to is not None:
                continue
            assert job.start is not None
            end = expected_end(job.start, self.pred.predict(job), job.limit, self.now)
            nodes.extend(job.node_ids)
            ends.extend([end] * len(job.node_ids))
        if nodes:
            # One call for every running job's nodes: a loop per node costs the cluster's size.
            np.maximum.at(drain, np.array(nodes, dtype=np.int64), np.array(ends))
        self._drains[admitted] = drain
        return drain

    def _reserve(self, job: SimJob, planned: np.ndarray | None = None,
                 plans: Sequence[BackfillPlan] = ()) -> bool:
        """Reserve nodes for LPJ ``job`` outside ``planned`` ones (held for the jobs ahead,
        whose ``plans`` also set when Slurm would start it without a reservation)."""
        eligible = ~self.c.blocked if planned is None else ~self.c.blocked & ~planned
        if int(eligible.sum()) < job.nodes:
            return False  # other reservations hold too much; it waits for one to start
        slurm_start = None
        if self.s.pay_for_itself:
            slurm_plan = self._plan(job, plans)
            slurm_start = slurm_plan.start if slurm_plan is not None else math.inf
        choice = choose_reservation(
            self.c.topology, self.c.names, self._drain(), eligible, self.now, self._shape(job),
            algo=self.s.placement, alpha=self.s.alpha, time_limit=self.s.placement_time_limit,
            spread_weight_h=self.s.spread_weight_h, horizon_s=self.s.reserve_horizon_h * 3600,
            slurm_start=slurm_start, idle_share=self.s.idle_share, placer=self.memo.place,
            index=self.c.index)
        if choice is None:
            return False  # not imminent: holding nodes idle that long costs more than it buys
        nodes = np.array([self.c.index[n] for n in choice.nodes], dtype=np.int64)
        res = Reservation(self.next_rid, job, nodes, choice.placement.cells,
                          choice.placement.metrics.weighted_spread, self.now,
                          earliest=choice.candidates[0][1], planned=choice.expected_start)
        self.next_rid += 1
        self.reservations[res.rid] = res
        self.res_of_job[job.index] = res.rid
        self.c.blocked[nodes] = True
        self._gate_drain = None
        return True

    def _expected_start(self, res: Reservation, drain: np.ndarray) -> float:
        return max(self.now, float(drain[res.nodes].max()))

    def _replan_reservations(self) -> None:
        """Move a reservation when other nodes would now drain clearly sooner (jobs ended
        early): Slurm's own plans are recomputed every pass, and a fixed node set would lose
        that."""
        if not self.reservations:
            return
        drain = self._drain()
        for res in list(self.reservations.values()):
            self._replan(res, drain)

    def _replan(self, res: Reservation, drain: np.ndarray, planned: np.ndarray | None = None,
                plans: Sequence[BackfillPlan] = ()) -> bool:
        """Move ``res`` (see ``_replan_reservations``), outside ``planned`` nodes; whether
        its LPJ still holds a reservation."""
        own = np.zeros(self.c.n, dtype=bool)
        own[res.nodes] = True
        eligible = ~self.c.blocked | own
        if planned is not None:
            eligible &= ~planned | own
        when = np.sort(np.maximum(drain[eligible], self.now))
        if len(when) < res.job.nodes:
            return True
        fresh = float(when[res.job.nodes - 1])
        # Against the earliest drain seen when it was planned, not its expected start:
        # the choice may wait on purpose (for spread), and must not be redone each pass.
        # Unless its own start has slipped (a job on its nodes outran its prediction and
        # is now expected to run to its limit): then against that slipped start.
        current = self._expected_start(res, drain)
        slipped = self.s.replan_on_slip and current > res.planned + self.s.replan_gain_s
        if fresh < res.earliest - self.s.replan_gain_s or (
                slipped and fresh < current - self.s.replan_gain_s):
            self._release(res)
            # Its own nodes stay open to it even where a plan ahead counts on them (that plan
            # already expects this LPJ to run there first): the move was judged so above.
            if not self._reserve(res.job, None if planned is None else planned & ~own, plans):
                return False
            self.replans += 1
        return True

    def _start_drained_reservations(self) -> None:
        for res in list(self.reservations.values()):
            if bool((self.c.free_gpus[res.nodes] == self.c.g).all()):
                self._release(res)
                job = res.job
                job.weighted_spread = res.spread
                order = [self.c.index[n] for _, ns in sorted(res.cells.items()) for n in ns]
                ready = max(res.created, float(self.nonadmitted_free[res.nodes].max()))
                if res.admitted:
                    # Admissions held the LPJ past the moment its nodes were otherwise free;
                    # the part past what the admitted jobs were predicted to need is the
                    # mispredictions' (share mode; in shrink mode they are cut instead).
                    self.lpj_admission_delay += max(0.0, self.now - ready)
                    self.lpj_delay += max(0.0, self.now - max(ready, res.promised))
                self._start(job, order)

    def _admit(self, job: SimJob) -> bool:
        """Try to start a short job on idle reserved nodes (the predictor's gate)."""
        drain = self._gate_drain
        predicted = self.pred.predict(job)
        for res in self.reservations.values():
            mask = np.zeros(self.c.n, dtype=bool)
            mask[res.nodes] = True
            mask &= self._candidates(job)
            if not mask.any():
                continue
            if drain is None:
                # Within a pass only admitted jobs start on reserved nodes, and they are left
                # out of this drain, so it holds until a reservation is made or moved.
                drain = self._gate_drain = self._drain(admitted=False)
            expected = self._expected_start(res, drain)
            if not admits(self.now, predicted, expected):
                continue
            nodes = self._choose(job, mask)
            if nodes is None:
                continue
            limit = shrunk_limit(self.now, expected) if self.s.mode == "shrink" else None
            if limit is not None and limit >= job.limit:
                limit = None
            self._start(job, nodes, limit=limit, admitted_to=res.rid)
            res.admitted.add(job.index)
            res.promised = max(res.promised, self.now + predicted)
            self.backfilled_in_reservations += 1
            return True
        return False

    # -- results --------------------------------------------------------------------------
    def metrics(self) -> dict[str, Any]:
        """The ``arnold sim --json`` object."""
        jobs = self.jobs
        span = max(max((j.end or 0 for j in jobs), default=0.0)
                   - min((j.submit for j in jobs), default=0.0), 1e-9)
        lpj = [j for j in jobs if j.lpj]
        return {
            **job_metrics(jobs, self.c.total_gpus, [self._lpj_spread(j) for j in lpj]),
            "backfilled_in_reservations": self.backfilled_in_reservations,
            "reserved_idle_node_h": round(self.reserved_idle_s / 3600.0, 6),
            "lpj_delay_h_from_mispredictions": round(self.lpj_delay / 3600.0, 6),
            "lpj_delay_h_from_admissions": round(self.lpj_admission_delay / 3600.0, 6),
            "killed_jobs": self.killed,
            **prediction_accuracy(jobs),
            "jobs": len(jobs),
            "dropped_jobs": self.w.dropped_too_large + self.w.dropped_unusable,
            "lpjs": len(lpj),
            "dropped_too_large": self.w.dropped_too_large,
            "dropped_unusable": self.w.dropped_unusable,
            "policy": self.s.policy,
            "predictor": self.pred.name,
            "mode": self.s.mode if self.s.policy == "arnold" else None,
            "retrains": self.pred.retrains,
            "reservations": self.next_rid,
            "replans": self.replans,
            "placements_solved": self.memo.misses,
            "placements_reused": self.memo.hits,
            "placements_time_limited": self.memo.time_limited,
            "placement_slowest_s": round(self.memo.slowest_s, 3),
            "domains": self.c.n_domains,
            "whole_domains_free_mean": round(self.whole_domain_s / span, 6)
            if self.c.n_domains else None,
            "keep_domains_whole": self.c.keep_domains_whole,
        }

    def _lpj_spread(self, job: SimJob) -> float:
        if job.weighted_spread is None:
            names = [self.c.names[i] for i in job.node_ids]
            placement = place_from_node_list("slurm", names, self.c.topology, self._shape(job),
                                             self.s.alpha)
            job.weighted_spread = placement.metrics.weighted_spread
        return job.weighted_spread


def simulate(cluster: SimCluster, workload: Workload, settings: SimSettings,
             progress: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Run one simulation; the metrics of ``arnold sim --json``."""
    return Simulation(cluster, workload, settings, progress).run()


