"""The placement MIP over every tier at once, each tier held to the rivals' best there.

``placement.mip`` decides counts per minipod and leaves the other tiers to ``regroup`` and
``arrange``; on a tree with NVLink domains that can leave a tier worse than Slurm's block
rule or a baseline there (``placement.dominate``). This model asks the question an admin
asks directly: is there a placement whose weighted spread at *every* tier is at most the
best any rival reaches there (its "bar")? It counts units (TP groups) per stage and NVLink
domain, the smallest place a unit lives in, and every tier above the domain is a sum of
domains:

  n[j,d]    integer  units of stage j in domain d
  r[t,j,s]  binary   stage j uses place s of tier t (t = 0 is the domain itself)
  c[t,s]    integer  pipelines with at least one unit in place s of tier t
  S_dp[t], S_pp[t]   integer, the largest DP and PP spreads at tier t

  StageComplete(j):     sum_d n[j,d] = D'
  Capacity(d):          sum_j n[j,d] <= units domain d holds
  Uses(t,j,s):          N[j,s] <= min(D', cap_s) * r[t,j,s]     (N: units of j under s)
  DpSpread(t,j):        sum_s r[t,j,s] <= S_dp[t]
  ColumnsTouch(t,j,s):  N[j,s] <= c[t,s]                     (one unit per pipeline)
  ColumnUnits(t,s):     sum_j N[j,s] <= PP * c[t,s]          (a pipeline has PP units)
  PpSpread(t):          sum_s c[t,s] <= D' * S_pp[t]
  TierBar(t):           alpha_t * S_dp[t] + beta_t * S_pp[t] <= bar_t
  StageOrder(j):        n[j,d0] >= n[j+1,d0]                 (stages are interchangeable)
  minimise sum_t alpha_t * S_dp[t] + beta_t * S_pp[t]

Every real placement satisfies these constraints, so the model is a relaxation: when SCIP
proves it infeasible, no placement is as good as the rivals' best at every tier, and that
is reported as proven. A solution's DP spreads are exact (a stage's places are its counts');
its pipelines are realised by ``layout_from_tier_counts``, which lines the stages' units up
in tree order so that a pipeline's units sit as close together as the counts allow, and its
PP spreads are then measured, not assumed.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyscipopt import Model


@dataclass
class TierProblem:
    """Units each NVLink domain holds, each domain's place at every tier above it (the
    domain's own tier first: ``places[0][d] == d``), the tiers' weights (alpha, beta) and
    bars, and the job's matrix (stages x columns)."""

    capacities: dict[str, int]
    places: list[dict[str, str]]
    weights: list[tuple[float, float]]
    bars: list[float]
    stages: int
    columns: int

    @classmethod
    def of_free(cls, nodes_of: dict[str, list[str]], places: Sequence[Callable[[str], str]],
                weights: list[tuple[float, float]], bars: list[float], stages: int,
                columns: int, nodes_per_unit: int) -> TierProblem:
        """The problem on the free nodes of each domain (``nodes_by_domain``), units of
        ``nodes_per_unit`` nodes; ``places``: node -> its place per tier, nearest first."""
        caps = {d: len(ns) // nodes_per_unit for d, ns in nodes_of.items()
                if len(ns) >= nodes_per_unit}
        return cls(caps, [{d: where(nodes_of[d][0]) for d in caps} for where in places],
                   weights, bars, stages, columns)

    def size(self) -> int:
        """Variables of the model (n, r and c), to decide whether it is worth building."""
        per_stage = sum(len(set(p.values())) for p in self.places)
        return self.stages * (len(self.capacities) + per_stage) + per_stage


@dataclass
class TierResult:
    """SCIP's answer: units per (stage, domain) of the best solution found (None: none),
    the status, the bound and gap on the summed objective, the time and the nodes."""

    counts: list[dict[str, int]] | None
    status: str
    dual_bound: float
    gap: float | None
    seconds: float
    nodes: int

    @property
    def proven_impossible(self) -> bool:
        """SCIP proved that no placement meets every tier's bar."""
        return self.status == "infeasible"


def build_tier_model(problem: TierProblem) -> tuple[Model, dict[str, Any]]:
    """The model of the module docstring, constraint families named as there."""
    from pyscipopt import Model, quicksum

    caps = problem.capacities
    domains = list(caps)
    stages = range(problem.stages)
    cols, pp = problem.columns, problem.stages
    m = Model("arnold-tiers")
    m.hideOutput()
    n = {(j, d): m.addVar(f"n[{j},{d}]", vtype="I", lb=0, ub=min(cols, caps[d]))
         for j in stages for d in domains}
    for j in stages:
        m.addCons(quicksum(n[j, d] for d in domains) == cols, name=f"StageComplete({j})")
        if j + 1 < problem.stages:
            m.addCons(n[j, domains[0]] >= n[j + 1, domains[0]], name=f"StageOrder({j})")
    for d in domains:
        m.addCons(quicksum(n[j, d] for j in stages) <= caps[d], name=f"Capacity({d})")
    spreads: dict[str, Any] = {}
    objective = []
    for t, (where, (alpha, beta), bar) in enumerate(zip(problem.places, problem.weights,
                                                        problem.bars, strict=True)):
        members: dict[str, list[str]] = {}
        for d in domains:
            members.setdefault(where[d], []).append(d)
        if len(members) < 2:
            continue  # one place: both spreads are 1
        s_dp = m.addVar(f"S_dp[{t}]", vtype="I", lb=1, ub=len(members))
        s_pp = m.addVar(f"S_pp[{t}]", vtype="I", lb=1, ub=min(pp, len(members)))
        spreads[f"S_dp[{t}]"], spreads[f"S_pp[{t}]"] = s_dp, s_pp
        touching = []
        uses: dict[int, list[Any]] = {j: [] for j in stages}
        for s, ds in members.items():
            cap_s = min(cols, sum(caps[d] for d in ds))
            c = m.addVar(f"c[{t},{s}]", vtype="I", lb=0, ub=cap_s)
            touching.append(c)
            for j in stages:
                units = quicksum(n[j, d] for d in ds)
                r = m.addVar(f"r[{t},{j},{s}]", vtype="B")
                uses[j].append(r)
                m.addCons(units <= cap_s * r, name=f"Uses({t},{j},{s})")
                m.addCons(units <= c, name=f"ColumnsTouch({t},{j},{s})")
            m.addCons(quicksum(n[j, d] for j in stages for d in ds) <= pp * c,
                      name=f"ColumnUnits({t},{s})")
        for j in stages:
            m.addCons(quicksum(uses[j]) <= s_dp, name=f"DpSpread({t},{j})")
        m.addCons(quicksum(touching) <= cols * s_pp, name=f"PpSpread({t})")
        m.addCons(alpha * s_dp + beta * s_pp <= bar + 1e-6, name=f"TierBar({t})")
        objective.append(alpha * s_dp + beta * s_pp)
    m.setObjective(quicksum(objective) if objective else 0.0, "minimize")
    return m, {"n": n, **spreads}


def solve_tiers(problem: TierProblem, *, node_limit: int, time_limit: float) -> TierResult:
    """Solve ``build_tier_model``; ``node_limit`` decides how long SCIP looks (the answer does
    not depend on the machine's load), ``time_limit`` is a safety net."""
    from slurm_arnold.placement.mip import SCIP_SEED

    t0 = time.monotonic()
    model, v = build_tier_model(problem)
    # Any solution within the bars will do (each tier is then as good as the rivals' best),
    # so SCIP stops at the first; without cutting planes, which on these models cost far
    # more per node than they prune (as on the count model's boxes).
    model.setParam("limits/solutions", 1)
    model.setParam("separating/maxrounds", 0)
    model.setParam("separating/maxroundsroot", 0)
    model.setParam("limits/nodes", node_limit)
    model.setParam("limits/time", max(0.05, time_limit))
    model.setParam("randomization/randomseedshift", SCIP_SEED)
    model.optimize()
    status = str(model.getStatus())
    counts = None
    gap: float | None = None
    if model.getNSols() > 0:
        sol = model.getBestSol()
        counts = [{d: k for d in problem.capacities
                   if (k := round(model.getSolVal(sol, v["n"][j, d]))) > 0}
                  for j in range(problem.stages)]
        gap = max(0.0, model.getGap())
    dual = model.getDualbound() if status != "infeasible" else float("inf")
    return TierResult(counts, status, dual, gap, time.monotonic() - t0, model.getNNodes())


def nodes_by_domain(free: Sequence[str], domain_of: Callable[[str], str],
                    places: Sequence[Callable[[str], str]]) -> dict[str, list[str]] | None:
    """The ``free`` nodes of each NVLink domain, in their order; None when some domain's
    nodes are not all in one place of every tier (``places``: node -> place per tier), where
    units could not be counted, or moved, domain by domain."""
    nodes_of: dict[str, list[str]] = {}
    for n in free:
        nodes_of.setdefault(domain_of(n), []).append(n)
    if any(len({where(n) for n in ns}) > 1 for where in places for ns in nodes_of.values()):
        return None
    return nodes_of


def layout_from_tier_counts(counts: Sequence[dict[str, int]], order: Sequence[str]
                            ) -> list[list[str]]:
    """Each stage's units as a list of domains, one per pipeline: every stage's units in the
    tree ``order`` of their domains, pipeline k taking the k-th of each (stages spread alike
    then share places pipeline by pipeline)."""
    rank = {d: i for i, d in enumerate(order)}
    return [[d for d in sorted(row, key=rank.__getitem__) for _ in range(row[d])]
            for row in counts]


def cells_from_domain_layout(layout: Sequence[Sequence[str]], nodes_of: dict[str, list[str]],
                             nodes_per_unit: int) -> dict[tuple[int, int], list[str]]:
    """Cells (stage, pipeline) -> nodes: each unit takes the next ``nodes_per_unit`` of its
    domain's free nodes (``nodes_of``, in tree order)."""
    taken = dict.fromkeys(nodes_of, 0)
    cells = {}
    for j, row in enumerate(layout):
        for k, d in enumerate(row):
            first = taken[d]
            cells[j, k] = nodes_of[d][first:first + nodes_per_unit]
            taken[d] = first + nodes_per_unit
    return cells
