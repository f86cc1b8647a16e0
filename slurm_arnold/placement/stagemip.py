"""Stage by stage: each stage placed by its own small MIP, its DP spread at every tier held
where no pipeline can then break a bar.

A pipeline of PP stages touches at most ``min(PP, places)`` places of a tier, whatever the
order its units are lined up in. So where a tier's bar (the best any rival reaches there)
still leaves room once the PP spread is at that most, a DP spread of at most

    cap_t = floor((bar_t - beta_t * min(PP, places_t)) / alpha_t)

keeps the tier within its bar, and a placement whose every stage is within every cap is
nowhere worse than any rival, proven by arithmetic and not by search. Stages are then
independent but for the room they share, so each is one small MIP on the room the stages
before it left (no symmetry between stages, which is what stalls the tier model of
``placement.tiermip`` on large trees):

  u[g]   integer  units of the stage in class g (the NVLink domains under one parent place
                  with the same free units: they are interchangeable)
  z[g]   integer  domains of class g the stage uses
  y[t,s] binary   the stage uses place s of tier t (t >= 1)

  StageComplete:     sum_g u[g] = columns
  ClassDomains(g):   u[g] <= room of one domain of g * z[g]
  PlaceUses(t,s):    sum_{g under s} u[g] <= min(columns, room under s) * y[t,s]
  DomainCap:         sum_g z[g] <= cap_0
  PlaceCap(t):       sum_s y[t,s] <= cap_t
  minimise the places used, summed over tiers (a stage packed tight leaves room whole)

The first solution is taken (any meets the caps); SCIP is stopped by a node limit, so the
answer does not depend on the machine's load. A stage's units in a class fill its
domains in order, each to its room, which uses at most ``z[g]`` of them.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from slurm_arnold.placement.tiermip import TierProblem

if TYPE_CHECKING:
    from pyscipopt import Model

#: Branch-and-bound nodes SCIP may spend on one stage. On `arnold bench placement --nvl`
#: (its 24 cases and 40 random trees) a stage took at most 18 when it was found at all.
STAGE_NODES = 2_000


@dataclass
class StageRun:
    """What the stage models did: the units per (stage, domain) when every stage was
    placed (else None), the stages placed, SCIP's status on the last, nodes and seconds."""

    counts: list[dict[str, int]] | None
    stages_placed: int
    status: str
    nodes: int
    seconds: float

    def as_json(self) -> dict[str, object]:
        """``arnold place --json``'s ``info.dominance.stage_models``."""
        return {"stages_placed": self.stages_placed, "status": self.status,
                "nodes": self.nodes, "seconds": round(self.seconds, 3)}


def dp_caps(problem: TierProblem) -> list[int] | None:
    """The largest DP spread each tier allows once pipelines spread as far as they can
    (module docstring); None when some tier's bar leaves no room for that."""
    caps = []
    for where, (alpha, beta), bar in zip(problem.places, problem.weights, problem.bars,
                                         strict=True):
        places = len(set(where.values()))
        widest = beta * min(problem.stages, places)
        if alpha <= 0:  # DP spread is free here: only the pipelines count
            cap = places if widest <= bar + 1e-9 else 0
        else:
            cap = math.floor((bar - widest) / alpha + 1e-9)
        if cap < 1:
            return None
        caps.append(cap)
    return caps


def _classes(problem: TierProblem, room: dict[str, int]) -> dict[tuple[str, int], list[str]]:
    """Domains with free room grouped by (parent place, room), in the problem's order."""
    parent = problem.places[1] if len(problem.places) > 1 else {d: d for d in room}
    out: dict[tuple[str, int], list[str]] = {}
    for d in problem.capacities:
        if room[d] > 0:
            out.setdefault((parent[d], room[d]), []).append(d)
    return out


def build_stage_model(problem: TierProblem, room: dict[str, int], caps: Sequence[int]
                      ) -> tuple[Model, dict[str, Any]]:
    """One stage's model (module docstring) on the domains' ``room``, DP spreads within
    ``caps``; the constraint families are named as there."""
    from pyscipopt import Model, quicksum

    classes = _classes(problem, room)
    m = Model("arnold-stage")
    m.hideOutput()
    u, z = {}, {}
    for (parent, each), ds in classes.items():
        g = (parent, each)
        z[g] = m.addVar(f"z[{parent},{each}]", vtype="I", lb=0, ub=len(ds))
        u[g] = m.addVar(f"u[{parent},{each}]", vtype="I", lb=0,
                        ub=min(problem.columns, each * len(ds)))
        m.addCons(u[g] <= each * z[g], name=f"ClassDomains({parent},{each})")
    m.addCons(quicksum(u.values()) == problem.columns, name="StageComplete")
    m.addCons(quicksum(z.values()) <= caps[0], name="DomainCap")
    used = list(z.values())
    for t in range(1, len(problem.places)):
        under: dict[str, list[tuple[str, int]]] = {}
        for g, ds in classes.items():
            under.setdefault(problem.places[t][ds[0]], []).append(g)
        y = {s: m.addVar(f"y[{t},{s}]", vtype="B") for s in under}
        for s, gs in under.items():
            most = min(problem.columns, sum(g[1] * len(classes[g]) for g in gs))
            m.addCons(quicksum(u[g] for g in gs) <= most * y[s], name=f"PlaceUses({t},{s})")
        m.addCons(quicksum(y.values()) <= caps[t], name=f"PlaceCap({t})")
        used += list(y.values())
    m.setObjective(quicksum(used), "minimize")
    return m, {"u": u, "classes": classes}


def place_stages(problem: TierProblem, *, deadline: float | None = None,
                 node_limit: int = STAGE_NODES) -> StageRun | None:
    """Every stage in turn by ``build_stage_model`` (None when the bars leave no DP caps);
    stops at the first stage with no solution, or at ``deadline`` (``time.monotonic()``,
    a safety net)."""
    from slurm_arnold.placement.mip import SCIP_SEED

    caps = dp_caps(problem)
    if caps is None:
        return None
    t0 = time.monotonic()
    room = dict(problem.capacities)
    counts: list[dict[str, int]] = []
    nodes, status = 0, "not started"
    for _ in range(problem.stages):
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            status = "time limit"
            break
        model, v = build_stage_model(problem, room, caps)
        model.setParam("limits/solutions", 1)
        # Without cutting planes: on these models they cost more than they prune.
        model.setParam("separating/maxrounds", 0)
        model.setParam("separating/maxroundsroot", 0)
        model.setParam("limits/nodes", node_limit)
        if left is not None:
            model.setParam("limits/time", max(0.05, left))
        model.setParam("randomization/randomseedshift", SCIP_SEED)
        model.optimize()
        status, nodes = str(model.getStatus()), nodes + model.getNNodes()
        if model.getNSols() == 0:
            break
        sol = model.getBestSol()
        row: dict[str, int] = {}
        for g, ds in v["classes"].items():
            units = round(model.getSolVal(sol, v["u"][g]))
            for d in ds:
                if units <= 0:
                    break
                row[d] = min(room[d], units)
                units -= row[d]
        for d, k in row.items():
            room[d] -= k
        counts.append(row)
    done = len(counts) == problem.stages
    return StageRun(counts if done else None, len(counts), status, nodes,
                    time.monotonic() - t0)
