"""``place``: run one placement algorithm over a topology and a set of free nodes."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable

from slurm_arnold.errors import InfeasibleError
from slurm_arnold.placement.bands import band_layout
from slurm_arnold.placement.baselines import BASELINES, aligned_cells, baseline_cells
from slurm_arnold.placement.bounds import spread_pairs
from slurm_arnold.placement.job import JobShape
from slurm_arnold.placement.mip import (
    CountProblem,
    layout_from_counts,
    solve_box,
    solve_box_exact,
)
from slurm_arnold.placement.plan import Cell, Metrics, Placement, cells_from_rank_order, measure
from slurm_arnold.placement.pool import Pool
from slurm_arnold.topology import Topology

OFFLINE_ALGOS = ("mip", *BASELINES)
#: With "slurm": the nodes slurmctld itself would choose (live only).
ALGOS = (*OFFLINE_ALGOS, "slurm")
# Largest stages x pipelines x minipods for which a box may be decided cell by cell.
EXACT_MAX_BINARIES = 4000


def check_alpha(alpha: float) -> float:
    """alpha must lie in [0, 1] (beta = 1 - alpha)."""
    if not 0.0 <= alpha <= 1.0 or math.isnan(alpha):
        raise InfeasibleError(f"--alpha {alpha} is outside [0, 1]; alpha + beta = 1")
    return alpha


def place(topology: Topology, free: Iterable[str], job: JobShape, *, algo: str = "mip",
          alpha: float = 0.5, time_limit: float = 10.0, seed: int = 0,
          max_spreads: tuple[int, int] | None = None) -> Placement:
    """Place ``job`` on the ``free`` nodes of ``topology`` with ``algo``.

    ``max_spreads`` (DP, PP; MIP only) keeps both spreads within those limits: the best
    weighted placement among those that are nowhere worse.

    Raises ``InfeasibleError`` when the free nodes cannot hold the job (within the limits).
    """
    check_alpha(alpha)
    free_set = set(free)
    free_list = [n for n in topology.nodes if n in free_set]
    if len(free_list) < job.nodes:
        raise InfeasibleError(
            f"the job needs {job.nodes} nodes ({job.gpus} GPUs) but only {len(free_list)} are "
            "free; ask for fewer nodes or wait"
        )
    t0 = time.monotonic()
    if algo in BASELINES:
        cells = baseline_cells(algo, topology, free_list, job, seed)
        return Placement(algo, job, alpha, cells, measure(cells, job, topology, alpha),
                         time.monotonic() - t0)
    if algo == "mip":
        return _place_mip(topology, free_list, job, alpha, time_limit, seed, t0, max_spreads)
    raise InfeasibleError(f"unknown placement algorithm {algo!r}; use one of "
                          f"{', '.join(OFFLINE_ALGOS)}")


def place_from_node_list(algo: str, nodes: list[str], topology: Topology, job: JobShape,
                         alpha: float) -> Placement:
    """A placement from a node list someone else chose (e.g. slurmctld), with today's rank
    order: the list's order, Megatron's default TP-DP-PP rank order."""
    if len(nodes) != job.nodes:
        raise InfeasibleError(f"{algo} gave {len(nodes)} nodes for a job of {job.nodes}")
    unknown = [n for n in nodes if n not in topology.node_leaf]
    if unknown:
        raise InfeasibleError(f"{algo} chose node {unknown[0]}, which is not in the topology")
    cells = cells_from_rank_order(nodes, job)
    return Placement(algo, job, alpha, cells, measure(cells, job, topology, alpha))


def _leaf_local(cells: dict[Cell, list[str]], topology: Topology) -> bool:
    return all(len({topology.leaf_of(n) for n in nodes}) == 1 for nodes in cells.values())


def _lower_bounds(caps: list[int], job: JobShape) -> tuple[int, int]:
    """Fewest minipods one DP group (D' units) and one pipeline (PP units) can fit in."""
    def fewest(size: int) -> int:
        total = 0
        for i, c in enumerate(caps, start=1):
            total += c
            if total >= size:
                return i
        return len(caps)
    return fewest(job.columns), fewest(job.pp)


def _place_mip(topology: Topology, free: list[str], job: JobShape, alpha: float,
               time_limit: float, seed: int, t0: float,
               max_spreads: tuple[int, int] | None = None) -> Placement:
    cap_dp, cap_pp = max_spreads or (math.inf, math.inf)

    def within(m: Metrics) -> bool:
        return m.max_dp_spread <= cap_dp and m.max_pp_spread <= cap_pp

    pool = Pool.build(topology, free, job)
    caps = pool.capacities()
    if sum(caps.values()) < job.units:
        raise InfeasibleError(
            f"the job needs {job.units} groups of {job.nodes_per_unit} nodes under one leaf "
            f"switch, only {sum(caps.values())} fit in the free nodes; ask for fewer or wait"
        )
    # Warm starts: every baseline and both alignments; the result is never worse than these.
    starts: dict[str, dict[Cell, list[str]]] = {
        "dp-aligned": aligned_cells(pool, job, by="dp"),
        "pp-aligned": aligned_cells(pool, job, by="pp"),
    }
    for name in BASELINES:
        starts[name] = baseline_cells(name, topology, free, job, seed)
    scored = {name: measure(c, job, topology, alpha) for name, c in starts.items()}
    phases = {"baselines": time.monotonic() - t0}
    valid = [n for n in starts if _leaf_local(starts[n], topology) and within(scored[n])]
    if not valid:
        # Only with max_spreads: no start within them; SCIP's boxes below may still be.
        best_name, best_cells = "none", {}
        best = Metrics(0, 0, math.inf, 0)
    else:
        best_name = min(valid, key=lambda n: (scored[n].weighted_spread, n != "pp-aligned"))
        best_cells, best = starts[best_name], scored[best_name]

    # Walk the possible spreads (a, b) from the cheapest: the product bound rules most of
    # them out at once; SCIP decides the rest, each within a share of the time left. The
    # first box that SCIP neither rules out nor solves in time is the dual bound.
    lb_dp, lb_pp = _lower_bounds(list(caps.values()), job)
    pairs = [pr for pr in spread_pairs(list(caps.values()), job.pp, job.columns, alpha,
                                       best.weighted_spread)
             if lb_dp <= pr[1] <= cap_dp and lb_pp <= pr[2] <= cap_pp]
    phases["bound"] = time.monotonic() - t0 - sum(phases.values())
    # Bands first: the cheapest (a, b) the product bound allows that a band layout reaches.
    for cost, a, b, possible in pairs:
        if not possible or cost >= best.weighted_spread - 1e-9:
            continue
        layout = band_layout(caps, job.pp, job.columns, a, b)
        if layout is not None:
            cells = cells_from_layout(layout, pool, job, alpha)
            metrics = measure(cells, job, topology, alpha)
            if metrics.weighted_spread < best.weighted_spread - 1e-9 and within(metrics):
                best_cells, best, best_name = cells, metrics, "bands"
            break
    phases["bands"] = time.monotonic() - t0 - sum(phases.values())
    # Then SCIP on every box still cheaper than what we have: it proves a box empty, or finds
    # counts that we realise, or runs out of its share of time (the box bounds the gap).
    dual = best.weighted_spread
    boxes: list[dict[str, object]] = []
    for cost, a, b, possible in pairs:
        if not possible:
            continue
        if cost >= best.weighted_spread - 1e-9:
            break
        left = time_limit - (time.monotonic() - t0)
        if left <= 0.05:
            dual = min(dual, cost)
            break
        limit = min(len(caps), job.pp * a, job.columns * b)
        problem = CountProblem(dict(list(caps.items())[:limit]), job.pp, job.columns, alpha)
        box = solve_box(problem, (a, b), time_limit=left / 2, max_solutions=3, seed=seed)
        boxes.append({"a": a, "b": b, "status": box.status, "seconds": round(box.seconds, 3)})
        if box.status == "infeasible":
            continue
        layouts = (layout_from_counts(sol, job.columns, b) for sol in box.solutions)
        found = [lay for lay in layouts if lay is not None]
        if not found and job.units * len(problem.capacities) <= EXACT_MAX_BINARIES:
            # Counts that do not realise, on a job small enough to decide cell by cell.
            left = time_limit - (time.monotonic() - t0)
            status, exact = solve_box_exact(problem, (a, b), time_limit=left / 2)
            boxes.append({"a": a, "b": b, "status": f"exact {status}"})
            if status == "infeasible":
                continue
            found = [exact] if exact is not None else []
        realised = False
        for layout in found:
            cells = cells_from_layout(layout, pool, job, alpha)
            metrics = measure(cells, job, topology, alpha)
            if metrics.weighted_spread < best.weighted_spread - 1e-9 and within(metrics):
                best_cells, best, best_name = cells, metrics, "mip"
                realised = True
                break
        dual = min(dual, cost)
        if realised:
            break
    phases["scip"] = time.monotonic() - t0 - sum(phases.values())
    if not best_cells:
        raise InfeasibleError(f"no placement keeps DP spread <= {cap_dp} and PP spread <= "
                              f"{cap_pp}")
    dual = min(dual, best.weighted_spread)
    status = "optimal" if best.weighted_spread <= dual + 1e-9 else "gap"
    gap = (best.weighted_spread - dual) / best.weighted_spread if best.weighted_spread else 0.0
    info = {"source": best_name, "status": status, "dual_bound": dual, "boxes": boxes,
            "phase_seconds": {k: round(v, 4) for k, v in phases.items()},
            "pairs_ruled_out_by_bound": sum(1 for pr in pairs if not pr[3])}
    return Placement("mip", job, alpha, best_cells, best, time.monotonic() - t0,
                     round(max(gap, 0.0), 6), dual, info)


def cells_from_layout(layout: list[list[str]], pool: Pool, job: JobShape,
                      alpha: float) -> dict[Cell, list[str]]:
    """Concrete units for a (stage, pipeline) -> minipod layout: in each minipod the cells of one
    pipeline (or, when DP matters more, of one DP group) take consecutive units, fullest leaves
    first, so TP groups stay inside a leaf and neighbours share leaves where they can."""
    wanted: dict[str, list[Cell]] = {}
    for j, row in enumerate(layout):
        for col, pod in enumerate(row):
            wanted.setdefault(pod, []).append((j, col))
    cells: dict[Cell, list[str]] = {}
    for pod, want in wanted.items():
        units = pool.units_in(pod)
        if len(units) < len(want):  # pragma: no cover - Capacity(p) forbids it
            raise InfeasibleError(f"internal error: minipod {pod} over capacity")
        want.sort(key=(lambda c: (c[0], c[1])) if alpha > 0.5 else (lambda c: (c[1], c[0])))
        cells.update(zip(want, units, strict=False))
    return cells
