"""The placement MIP on counts per minipod (SCIP through pyscipopt), and its mapping to cells.

Placement inside a minipod barely matters (the paper measures under 0.3%) and the replicas of a
job are interchangeable, so the model never names a node or a replica. It decides, for every
stage j (a DP group) and minipod p, how many of the stage's D' units sit in p, and for every
minipod how many pipelines touch it:

  n[j,p]  integer   units of stage j in minipod p
  r[j,p]  binary    stage j uses minipod p
  c[p]    integer   pipelines (columns) with at least one unit in p
  S_dp, S_pp        integer, the largest DP and PP spreads

  StageComplete(j):   sum_p n[j,p] = D'
  Capacity(p):        sum_j n[j,p] <= free units of p
  DpGroupUses(j,p):   n[j,p] <= min(D', cap_p) * r[j,p]
  DpSpread(j):        sum_p r[j,p] <= S_dp
  ColumnsTouch(j,p):  n[j,p] <= c[p]          (a stage has one unit per pipeline)
  PpSpread:           sum_p c[p] <= S_pp * D' (a pipeline touches at most S_pp minipods)
  StageOrder(j):      n[j,p0] >= n[j+1,p0]    (stages are interchangeable; p0 the largest)
  minimise alpha * S_dp + (1 - alpha) * S_pp

Every real placement satisfies these constraints, so the model is a relaxation and SCIP's dual
bound is a true lower bound on the best weighted spread. ``cells_from_counts`` then realises the
counts: minipod p gets c[p] consecutive pipelines on a circle of D' pipelines (so no pipeline is
in more than ceil(sum c / D') <= S_pp of them), and each stage picks, pipeline by pipeline, one
minipod holding that pipeline, with n[j,p] picks in p (a bipartite matching). When every stage
matches, the placement reaches the model's objective and is therefore optimal.
"""

from __future__ import annotations

import itertools
import math
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyscipopt import Model


@dataclass
class CountProblem:
    """Minipod capacities in units (largest first), the matrix size and the DP weight."""

    capacities: dict[str, int]
    stages: int
    columns: int
    alpha: float


@dataclass
class CountSolution:
    """Units per (stage, minipod) and pipelines touching each minipod."""

    units: list[dict[str, int]]  # units[j][p]
    touching: dict[str, int]


def build_model(problem: CountProblem, limits: tuple[int, int]) -> tuple[Model, dict[str, Any]]:
    """Build the count model for spreads at most ``limits`` = (a, b) (S_dp <= a, S_pp <= b)."""
    caps = problem.capacities
    pods = list(caps)
    stages = range(problem.stages)
    cols = problem.columns
    # SCIP is loaded only when a box needs it: most placements never get here, and every
    # arnold-sbatch would pay its import (a sixth of a second) otherwise.
    from pyscipopt import Model, quicksum

    m = Model("arnold-placement")
    m.hideOutput()
    n = {(j, p): m.addVar(f"n[{j},{p}]", vtype="I", lb=0, ub=min(cols, caps[p]))
         for j in stages for p in pods}
    r = {(j, p): m.addVar(f"r[{j},{p}]", vtype="B") for j in stages for p in pods}
    c = {p: m.addVar(f"c[{p}]", vtype="I", lb=0, ub=min(cols, caps[p])) for p in pods}
    s_dp = m.addVar("S_dp", vtype="I", lb=1, ub=limits[0])
    s_pp = m.addVar("S_pp", vtype="I", lb=1, ub=limits[1])
    for j in stages:
        m.addCons(quicksum(n[j, p] for p in pods) == cols, name=f"StageComplete({j})")
        for p in pods:
            m.addCons(n[j, p] <= min(cols, caps[p]) * r[j, p], name=f"DpGroupUses({j},{p})")
            m.addCons(n[j, p] <= c[p], name=f"ColumnsTouch({j},{p})")
        m.addCons(quicksum(r[j, p] for p in pods) <= s_dp, name=f"DpSpread({j})")
        if j + 1 < problem.stages:
            m.addCons(n[j, pods[0]] >= n[j + 1, pods[0]], name=f"StageOrder({j})")
    for p in pods:
        m.addCons(quicksum(n[j, p] for j in stages) <= caps[p], name=f"Capacity({p})")
    m.addCons(quicksum(c.values()) <= cols * s_pp, name="PpSpread")
    m.setObjective(problem.alpha * s_dp + (1 - problem.alpha) * s_pp, "minimize")
    return m, {"n": n, "r": r, "c": c, "S_dp": s_dp, "S_pp": s_pp}


@dataclass
class BoxResult:
    """What SCIP said about one spread box: solutions found (best first), the status and the
    branch-and-bound nodes it took."""

    solutions: list[CountSolution]
    status: str
    seconds: float
    nodes: int = 0


#: SCIP's random seed. Fixed: a user's ``--seed`` must not change the placement they get.
SCIP_SEED = 0


def solve_box(problem: CountProblem, limits: tuple[int, int], *, node_limit: int,
              time_limit: float, max_solutions: int = 1) -> BoxResult:
    """Look for count solutions with spreads within ``limits``; status ``infeasible`` proves
    there are none (the model is a relaxation, so then no placement has such spreads).

    Any solution in the box will do (boxes are tried cheapest first), so SCIP searches for
    feasibility: no objective, no cutting planes (on these models they cost far more per node
    than they prune). ``node_limit`` decides how long it looks, so the answer does not depend
    on the machine's load; ``time_limit`` is only a safety net.
    """
    t0 = time.monotonic()
    model, v = build_model(problem, limits)
    model.setObjective(0.0)
    model.setParam("separating/maxrounds", 0)
    model.setParam("separating/maxroundsroot", 0)
    model.setParam("limits/nodes", node_limit)
    model.setParam("limits/time", max(0.05, time_limit))
    model.setParam("limits/solutions", max_solutions)
    model.setParam("randomization/randomseedshift", SCIP_SEED)
    model.optimize()
    pods = list(problem.capacities)
    found = []
    for sol in model.getSols()[:max_solutions]:
        units = []
        for j in range(problem.stages):
            row = {p: round(model.getSolVal(sol, v["n"][j, p])) for p in pods}
            units.append({p: k for p, k in row.items() if k > 0})
        touching = {p: max(max((u.get(p, 0) for u in units), default=0),
                           round(model.getSolVal(sol, v["c"][p]))) for p in pods}
        found.append(CountSolution(units, {p: t for p, t in touching.items() if t > 0}))
    return BoxResult(found, str(model.getStatus()), time.monotonic() - t0, model.getNNodes())


def layout_from_row_sets(capacities: dict[str, int], columns: int,
                         row_sets: Sequence[set[str]], spread_pp: int, *,
                         node_limit: int = 1000, time_limit: float = 10.0,
                         max_cells: int = 20_000) -> list[list[str]] | None:
    """A layout in which stage j uses only the minipods of ``row_sets[j]`` and no pipeline more
    than ``spread_pp`` minipods, or ``None`` when SCIP finds none within ``node_limit``.

    With the stages' minipods fixed, a pipeline is described by the set T of minipods it may
    use: any ``spread_pp`` of the stages' minipods that meets every stage's set. Pipelines of
    one type are interchangeable, so the model counts them (w[T]) and how many of them put
    stage j in minipod p (x[j,p,T]); every integer solution is a placement. ``None`` too when
    the model would have more than ``max_cells`` x variables (too big to build quickly).
    """
    from pyscipopt import Model, quicksum

    order = list(capacities)
    used = sorted(set().union(*row_sets), key=order.index)
    size = min(spread_pp, len(used))
    types = []
    cells = 0
    for combo in itertools.combinations(used, size):
        if all(row & set(combo) for row in row_sets):
            types.append(combo)
            cells += sum(len(row.intersection(combo)) for row in row_sets)
            if cells > max_cells:
                return None
    if not types:
        return None
    stages = range(len(row_sets))
    m = Model("arnold-pipeline-types")
    m.hideOutput()
    w = {t: m.addVar(f"w{t}", vtype="I", lb=0, ub=columns) for t in types}
    x = {(j, p, t): m.addVar(f"x[{j},{p},{t}]", vtype="I", lb=0)
         for j in stages for t in types for p in t if p in row_sets[j]}
    m.addCons(quicksum(w.values()) == columns, name="EveryPipeline")
    for j in stages:
        for t in types:
            m.addCons(quicksum(x[j, p, t] for p in t if p in row_sets[j]) == w[t],
                      name=f"StagePlaced({j},{t})")
    by_pod: dict[str, list[Any]] = {p: [] for p in used}
    for (_, p, _), var in x.items():
        by_pod[p].append(var)
    for p in used:
        m.addCons(quicksum(by_pod[p]) <= capacities[p], name=f"Capacity({p})")
    m.setParam("limits/nodes", node_limit)
    m.setParam("limits/time", max(0.05, time_limit))
    m.setParam("limits/solutions", 1)
    m.setParam("randomization/randomseedshift", SCIP_SEED)
    m.optimize()
    if m.getNSols() == 0:
        return None
    return _layout_from_types(m, types, w, x, len(row_sets), columns)


def solve_box_typed(problem: CountProblem, limits: tuple[int, int], *, node_limit: int,
                    time_limit: float, max_cells: int = 20_000
                    ) -> tuple[str, list[list[str]] | None]:
    """Status and, when found, a layout with spreads within ``limits`` = (a, b), from a model
    that is exact but counts pipelines instead of naming them.

    Pipelines are interchangeable, so a placement is described by how many pipelines have each
    *type* T (a set of b minipods they may use: w[T]) and how many of those put stage j in
    minipod p (x[j,p,T]); r[j,p] marks the minipods stage j uses. Every integer solution is a
    placement (the pipelines of type T take stage j's minipods in any order) and every
    placement is one, so ``infeasible`` proves the box empty. Status ``too big`` when it would
    have more than ``max_cells`` x variables.
    """
    caps = problem.capacities
    pods = list(caps)
    stages = range(problem.stages)
    cols = problem.columns
    a, b = limits
    size = min(b, len(pods))
    # Counted before they are listed: a wide box over many minipods has millions of types.
    if math.comb(len(pods), size) * size * problem.stages > max_cells:
        return "too big", None
    types = list(itertools.combinations(pods, size))
    from pyscipopt import Model, quicksum

    m = Model("arnold-placement-typed")
    m.hideOutput()
    w = {t: m.addVar(f"w{t}", vtype="I", lb=0, ub=cols) for t in types}
    x = {(j, p, t): m.addVar(f"x[{j},{p},{t}]", vtype="I", lb=0, ub=min(cols, caps[p]))
         for j in stages for t in types for p in t}
    r = {(j, p): m.addVar(f"r[{j},{p}]", vtype="B") for j in stages for p in pods}
    m.addCons(quicksum(w.values()) == cols, name="EveryPipeline")
    by_stage_pod: dict[tuple[int, str], list[Any]] = {(j, p): [] for j in stages for p in pods}
    for (j, p, _), var in x.items():
        by_stage_pod[j, p].append(var)
    for j in stages:
        for t in types:
            m.addCons(quicksum(x[j, p, t] for p in t) == w[t], name=f"StagePlaced({j},{t})")
        for p in pods:
            m.addCons(quicksum(by_stage_pod[j, p]) <= min(cols, caps[p]) * r[j, p],
                      name=f"DpGroupUses({j},{p})")
        m.addCons(quicksum(r[j, p] for p in pods) <= a, name=f"DpSpread({j})")
    for p in pods:
        m.addCons(quicksum(v for j in stages for v in by_stage_pod[j, p]) <= caps[p],
                  name=f"Capacity({p})")
    m.setParam("limits/nodes", node_limit)
    m.setParam("limits/time", max(0.05, time_limit))
    m.setParam("limits/solutions", 1)
    m.setParam("randomization/randomseedshift", SCIP_SEED)
    m.optimize()
    status = str(m.getStatus())
    if m.getNSols() == 0:
        return status, None
    return status, _layout_from_types(m, types, w, x, problem.stages, cols)


def _layout_from_types(m: Model, types: Sequence[tuple[str, ...]], w: dict[Any, Any],
                       x: dict[Any, Any], stages: int, columns: int) -> list[list[str]]:
    """The best solution of a pipeline-type model as a layout: the w[T] pipelines of each
    type take consecutive columns, and stage j of them the minipods of T, x[j,p,T] each (a
    missing x[j,p,T] is a minipod stage j may not use)."""
    sol = m.getBestSol()
    layout = [[""] * columns for _ in range(stages)]
    first = 0
    for t in types:
        for j in range(stages):
            col = first
            for p in t:
                var = x.get((j, p, t))
                for _ in range(0 if var is None else round(m.getSolVal(sol, var))):
                    layout[j][col] = p
                    col += 1
        first += round(m.getSolVal(sol, w[t]))
    return layout


def build_exact_model(problem: CountProblem,
                      limits: tuple[int, int]) -> tuple[Model, dict[str, Any]]:
    """The per-cell model of one spread box, for boxes the count model leaves open on small
    jobs: x[j,i,p] = 1 when stage j of pipeline i sits in minipod p. Exact, but with
    stages x pipelines x minipods binaries, so only used when that product is small."""
    caps = problem.capacities
    pods = list(caps)
    stages, cols = range(problem.stages), range(problem.columns)
    from pyscipopt import Model, quicksum

    m = Model("arnold-placement-exact")
    m.hideOutput()
    x = {(j, i, p): m.addVar(f"x[{j},{i},{p}]", vtype="B")
         for j in stages for i in cols for p in pods}
    r = {(j, p): m.addVar(f"r[{j},{p}]", vtype="B") for j in stages for p in pods}
    z = {(i, p): m.addVar(f"z[{i},{p}]", vtype="B") for i in cols for p in pods}
    for j in stages:
        for i in cols:
            m.addCons(quicksum(x[j, i, p] for p in pods) == 1, name=f"CellPlaced({j},{i})")
            for p in pods:
                m.addCons(x[j, i, p] <= r[j, p], name=f"DpGroupUses({j},{i},{p})")
                m.addCons(x[j, i, p] <= z[i, p], name=f"PipelineUses({j},{i},{p})")
        m.addCons(quicksum(r[j, p] for p in pods) <= limits[0], name=f"DpSpread({j})")
    for i in cols:
        m.addCons(quicksum(z[i, p] for p in pods) <= limits[1], name=f"PpSpread({i})")
    for p in pods:
        m.addCons(quicksum(x[j, i, p] for j in stages for i in cols) <= caps[p],
                  name=f"Capacity({p})")
    return m, {"x": x, "r": r, "z": z}


def solve_box_exact(problem: CountProblem, limits: tuple[int, int], *, node_limit: int,
                    time_limit: float) -> tuple[str, list[list[str]] | None]:
    """Status and, when found, a layout with spreads within ``limits`` (the exact model)."""
    model, v = build_exact_model(problem, limits)
    model.setParam("limits/nodes", node_limit)
    model.setParam("randomization/randomseedshift", SCIP_SEED)
    model.setParam("limits/time", max(0.05, time_limit))
    model.setParam("limits/solutions", 1)
    model.optimize()
    status = str(model.getStatus())
    if model.getNSols() == 0:
        return status, None
    sol = model.getBestSol()
    pods = list(problem.capacities)
    layout = [[next(p for p in pods if model.getSolVal(sol, v["x"][j, i, p]) > 0.5)
               for i in range(problem.columns)] for j in range(problem.stages)]
    return status, layout


def _match_stage(quota: dict[str, int], holders: Sequence[Sequence[str]]) -> list[str] | None:
    """Give each pipeline i one minipod from ``holders[i]``, ``quota[p]`` pipelines to each p
    (breadth-first augmenting paths); ``None`` when no such assignment exists."""
    left = dict(quota)
    owner: dict[str, set[int]] = {p: set() for p in quota}
    choice: list[str] = [""] * len(holders)
    for i in range(len(holders)):
        parent: dict[str, tuple[int, str | None]] = {}
        frontier: deque[str] = deque()
        for p in holders[i]:
            if p in left and p not in parent:
                parent[p] = (i, None)
                frontier.append(p)
        found = None
        while frontier:
            p = frontier.popleft()
            if left[p] > 0:
                found = p
                break
            for other in owner[p]:
                for q in holders[other]:
                    if q in left and q not in parent:
                        parent[q] = (other, p)
                        frontier.append(q)
        if found is None:
            return None
        left[found] -= 1
        step: str | None = found
        while step is not None:  # shift every pipeline on the path one minipod along
            col, prev = parent[step]
            owner[step].add(col)
            choice[col] = step
            if prev is not None:
                owner[prev].discard(col)
            step = prev
    return choice


def layout_from_counts(sol: CountSolution, columns: int, spread_pp: int) -> list[list[str]] | None:
    """Minipod of every (stage, pipeline), or ``None`` when the counts cannot be realised.

    Pipelines are laid on a circle and each minipod gets an arc of ``touching[p]`` pipelines,
    first widened to use the whole budget of ``spread_pp * D'`` arc length (more choice for the
    matching, never more than ``spread_pp`` arcs over one pipeline). Arc orders tried: widest
    first, narrowest first, and by name.
    """
    touching = dict(sol.touching)
    slack = spread_pp * columns - sum(touching.values())
    for p in sorted(touching, key=lambda p: -touching[p]):
        extra = min(slack, columns - touching[p])
        touching[p] += extra
        slack -= extra
    orders = [sorted(touching, key=lambda p: -touching[p]),
              sorted(touching, key=lambda p: touching[p]), sorted(touching)]
    for order in orders:
        layout = _layout_with_arcs(sol, touching, order, columns)
        if layout is not None:
            return layout
    return None


def _layout_with_arcs(sol: CountSolution, touching: dict[str, int], order: list[str],
                      columns: int) -> list[list[str]] | None:
    holders: list[list[str]] = [[] for _ in range(columns)]
    start = 0
    for p in order:
        for i in range(start, start + touching[p]):
            holders[i % columns].append(p)
        start += touching[p]
    layout = []
    for quota in sol.units:
        picks = _match_stage(quota, holders)
        if picks is None or len(picks) != columns:
            return None
        layout.append(picks)
    return layout
