"""The exact schedule for small pipelines: a MIP (SCIP) that minimises the makespan.

One builder, ``build``, with named constraint families:

- ``order_*``: on each stage, the F (B, W) blocks of micro-batches run in increasing order
  (CrossPipe's micro-batch order), B after its F, W after its B;
- ``disjoint_*``: two blocks of one stage never overlap; a binary says which goes first, for
  the pairs the fixed orders leave open (F_i vs B_j and W_j, B_i vs W_j, i > j);
- ``link_*``: a message leaves when its block ends and the link is free (messages on a link
  keep their producer's order), occupies it ``bandwidth_time``, arrives ``latency`` later;
  the consumer starts after it arrives;
- ``memory_*``: at every F, what the stage holds (F so far, minus what the B and W before it
  freed) stays within the limit;
- ``makespan_*``: the makespan is after every stage's last W.

Start times are continuous; the big-M is the warm start's makespan (the greedy schedule, given
to SCIP as its first solution), so nothing worse is searched. The schedule is read back as the
order of the start times. Only one chunk per stage (the space grows too fast with more).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from slurm_arnold.errors import ArnoldError
from slurm_arnold.pipeline.model import Block, PipelineModel
from slurm_arnold.pipeline.simulate import Schedule, simulate

EPS = 1e-6


@dataclass(frozen=True)
class Solved:
    """The solver's schedule and how sure it is."""

    schedule: Schedule
    makespan: float
    dual_bound: float
    gap: float
    status: str
    seconds: float
    warm_start: float


@dataclass
class _Mip:
    model: Any
    start: dict[tuple[int, Block], Any]
    first: dict[tuple[int, Block, Block], Any]  # 1: the first block runs before the second
    leave: dict[tuple[str, int, int], Any]  # (kind, boundary, micro-batch): departure
    makespan: Any


def _pairs(m: int) -> list[tuple[Block, Block]]:
    """Pairs of one stage's blocks whose order the fixed orders leave open."""
    out = []
    for i in range(m):
        for j in range(i):
            out += [(Block("F", i), Block("B", j)), (Block("F", i), Block("W", j)),
                    (Block("B", i), Block("W", j))]
    return out


def build(model: PipelineModel, limit: float, horizon: float) -> _Mip:
    """The MIP of ``model`` under memory ``limit`` with makespans up to ``horizon``."""
    from pyscipopt import Model, quicksum

    if model.chunks != 1 or model.sub_blocks != 1:
        raise ArnoldError("the optimal schedule is solved for one chunk per stage and whole "
                          "blocks; drop --chunks/--sub-blocks")
    p, m = model.stages, model.microbatches
    mip = Model("crosspipe")
    mip.hideOutput()
    big = horizon
    start: dict[tuple[int, Block], Any] = {}
    for s in range(p):
        for j in range(m):
            for k in ("F", "B", "W"):
                blk = Block(k, j)
                start[(s, blk)] = mip.addVar(f"start_{s}_{k}{j}", lb=0.0, ub=horizon)
    makespan = mip.addVar("makespan", lb=0.0, ub=horizon)
    dur = [{k: model.duration(Block(k, 0), s) for k in ("F", "B", "W")} for s in range(p)]
    for s in range(p):
        d = dur[s]
        upstream = sum(dur[u]["F"] for u in range(s))
        for j in range(m):
            f_start, b_start, w_start = (start[(s, Block(k, j))] for k in ("F", "B", "W"))
            mip.addCons(b_start >= f_start + d["F"], f"order_local_B_{s}_{j}")
            mip.addCons(w_start >= b_start + d["B"], f"order_local_W_{s}_{j}")
            # No F can start before the stages before have run theirs (tightens the LP).
            mip.addCons(f_start >= upstream + j * d["F"], f"order_earliest_{s}_{j}")
            if j:
                for k in ("F", "B", "W"):
                    mip.addCons(start[(s, Block(k, j))] >= start[(s, Block(k, j - 1))] + d[k],
                                f"order_mb_{s}_{k}{j}")
        mip.addCons(makespan >= start[(s, Block("W", m - 1))] + d["W"], f"makespan_{s}")
    first: dict[tuple[int, Block, Block], Any] = {}
    for s in range(p):
        for one, two in _pairs(m):
            y = mip.addVar(f"first_{s}_{one.label()}_{two.label()}", vtype="B")
            first[(s, one, two)] = y
            mip.addCons(start[(s, two)] >= start[(s, one)] + dur[s][one.kind] - big * (1 - y),
                        f"disjoint_{s}_{one.label()}_{two.label()}_a")
            mip.addCons(start[(s, one)] >= start[(s, two)] + dur[s][two.kind] - big * y,
                        f"disjoint_{s}_{one.label()}_{two.label()}_b")
    leaves: dict[tuple[str, int, int], Any] = {}
    for boundary in range(p - 1):
        occupancy, latency = model.link_cost(boundary)
        for kind, src, dst in (("F", boundary, boundary + 1), ("B", boundary + 1, boundary)):
            leave_prev = None
            for j in range(m):
                produced = start[(src, Block(kind, j))] + dur[src][kind]
                if occupancy == 0 and latency == 0:
                    mip.addCons(start[(dst, Block(kind, j))] >= produced,
                                f"link_{kind}_{boundary}_{j}")
                    continue
                leave = mip.addVar(f"leave_{kind}_{boundary}_{j}", lb=0.0, ub=horizon)
                leaves[(kind, boundary, j)] = leave
                mip.addCons(leave >= produced, f"link_ready_{kind}_{boundary}_{j}")
                if leave_prev is not None:
                    mip.addCons(leave >= leave_prev + occupancy, f"link_busy_{kind}_{boundary}_{j}")
                mip.addCons(start[(dst, Block(kind, j))] >= leave + occupancy + latency,
                            f"link_arrive_{kind}_{boundary}_{j}")
                leave_prev = leave
    freed_b, freed_w = model.mem_b - model.mem_w, model.mem_w
    for s in range(p):
        for j in range(m):
            held = (j + 1) * model.mem_b - quicksum(
                (1 - first[(s, Block("F", j), Block(k, i))]) * (freed_b if k == "B" else freed_w)
                for i in range(j) for k in ("B", "W"))
            mip.addCons(held <= limit + EPS, f"memory_{s}_{j}")
    mip.setObjective(makespan, "minimize")
    return _Mip(mip, start, first, leaves, makespan)


def solve(model: PipelineModel, warm: Schedule, *, limit: float,
          time_limit: float = 60.0) -> Solved:
    """The optimal schedule (or the best found in ``time_limit`` s, with its gap), from the
    warm start ``warm``."""
    t0 = time.monotonic()
    warm_result = simulate(model, warm)
    horizon = warm_result.makespan
    mip = build(model, limit, horizon + EPS)
    sol = mip.model.createSol()
    for key, var in mip.start.items():
        mip.model.setSolVal(sol, var, warm_result.times[key][0])
    for (s, a, b), var in mip.first.items():
        mip.model.setSolVal(sol, var, 1.0 if warm_result.times[(s, a)][0]
                            < warm_result.times[(s, b)][0] else 0.0)
    mip.model.setSolVal(sol, mip.makespan, horizon)
    _set_link_times(mip, model, warm_result.times, sol)
    mip.model.addSol(sol, free=True)
    mip.model.setParam("limits/time", time_limit)
    mip.model.optimize()
    status = mip.model.getStatus()
    if mip.model.getNSols() == 0:
        raise ArnoldError(f"the solver found no schedule ({status}); use --schedule greedy")
    best = mip.model.getBestSol()
    starts = {key: mip.model.getSolVal(best, var) for key, var in mip.start.items()}
    schedule = [sorted((blk for (st, blk) in starts if st == s),
                       key=lambda blk: (round(starts[(s, blk)], 6), "FBW".index(blk.kind),
                                        blk.mb))
                for s in range(model.stages)]
    # Read back through the simulator, so the reported makespan is the schedule's own.
    result = simulate(model, schedule)
    if result.makespan > horizon + 1e-6:  # rounding of equal start times: keep the warm start
        schedule, result = warm, warm_result
    dual = min(mip.model.getDualbound(), result.makespan)
    gap = (result.makespan - dual) / result.makespan if result.makespan else 0.0
    return Solved(schedule, result.makespan, dual, max(gap, 0.0), status,
                  time.monotonic() - t0, horizon)


def _set_link_times(mip: _Mip, model: PipelineModel,
                    times: dict[tuple[int, Block], tuple[float, float]], sol: Any) -> None:
    """The warm start's departure times of messages (as the simulator queues them)."""
    for (kind, boundary, j), var in sorted(mip.leave.items(), key=lambda kv: kv[0]):
        src = boundary if kind == "F" else boundary + 1
        occupancy, _ = model.link_cost(boundary)
        ready = times[(src, Block(kind, j))][1]
        leave = ready if j == 0 else max(ready, mip.model.getSolVal(
            sol, mip.leave[(kind, boundary, j - 1)]) + occupancy)
        mip.model.setSolVal(sol, var, leave)
