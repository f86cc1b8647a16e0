"""One spread box (a pipeline spread ``a``, a DP spread ``b``) decided by SCIP: the count
model's counts realised as cells, or, where they do not realise, the pipeline-type model and
(for small jobs) the cell model; every answer checked against the minipods' capacities."""

from __future__ import annotations

import time

from slurm_arnold.errors import InfeasibleError
from slurm_arnold.placement.job import JobShape
from slurm_arnold.placement.mip import (
    CountProblem,
    layout_from_counts,
    layout_from_row_sets,
    solve_box,
    solve_box_exact,
    solve_box_typed,
)
from slurm_arnold.placement.plan import Cell
from slurm_arnold.placement.pool import Pool

#: Largest stages x pipelines x minipods for which a box may be decided cell by cell. The cell
#: model's node budget (CELL_NODES) bounds its work badly: each node's LP and cuts grow with
#: the model. On the slowest boxes of Curie's replay (5,120 nodes; a one-off development
#: measurement, docs/placement.md), models of 768-2,560 binaries cost 12-72 s each and decided
#: one box in seven; of 224-384, 1-3 s, and they decided most. `arnold bench placement` (other
#: clusters and shapes) gave every case the same answer with it.
EXACT_MAX_BINARIES = 500
#: SCIP's work on one spread box: branch-and-bound nodes times the square of the count
#: model's variables (a node of a bigger model costs more, and more than linearly): 1,000
#: nodes at 250 variables, 50 at 1,100, never fewer than BOX_MIN_NODES. Work, not seconds,
#: decides when SCIP gives up, so a busy machine gets the same answer as an idle one. Set so
#: an undecided box costs about a second at 12,500 nodes; `arnold bench placement` reports
#: the proof rate and wall time this gives.
BOX_WORK = 62_500_000
BOX_MIN_NODES = 50
#: SCIP nodes for realising one box's counts, for the pipeline-type model and for the
#: per-cell model of small jobs.
REALISE_NODES = 1000
TYPED_NODES = 200
CELL_NODES = 200
#: Largest pipeline-type model (x variables: types x minipods per type x stages) tried. On the
#: slowest boxes of Curie's replay (the same measurement), models up to about a thousand cost
#: 0.2-2.5 s and found layouts in boxes the cell model left open after 12-72 s.
TYPED_MAX_CELLS = 5000


#: Names of the arguments by which SCIP rules a box out, as reported in ``--json``.
COUNT_MODEL = "count model (SCIP)"
TYPED_MODEL = "pipeline-type model (SCIP)"
CELL_MODEL = "cell model (SCIP)"


def solve_box_cells(box: tuple[float, int, int], caps: dict[str, int], pool: Pool, job: JobShape,
               alpha: float, seconds_left: float) -> tuple[list[dict[Cell, list[str]]], str,
                                                           dict[str, object]]:
    """Cells of the placements SCIP finds within box (cost, a, b) (the count model's counts,
    realised), the outcome (``infeasible``, ``found`` or ``open``) and a record for --json."""
    t0 = time.monotonic()
    cost, a, b = box
    limit = min(len(caps), job.pp * a, job.columns * b)
    problem = CountProblem(dict(list(caps.items())[:limit]), job.pp, job.columns, alpha)
    variables = 2 * job.pp * limit + limit + 2  # n, r, c, S_dp, S_pp
    result = solve_box(problem, (a, b), node_limit=max(BOX_MIN_NODES, BOX_WORK // variables**2),
                       time_limit=seconds_left,
                       max_solutions=3)
    record: dict[str, object] = {"a": a, "b": b, "cost": cost, "status": result.status,
                                 "nodes": result.nodes, "seconds": round(result.seconds, 3)}
    if result.status == "infeasible":
        record["proved_by"] = COUNT_MODEL
        return [], "infeasible", record
    layouts: list[list[list[str]]] = []
    for sol in result.solutions:
        layout = layout_from_counts(sol, job.columns, b)
        if layout is None:
            # The counts' stages and minipods, with pipelines chosen by type (exact).
            layout = layout_from_row_sets(problem.capacities, job.columns,
                                          [set(u) for u in sol.units], b,
                                          node_limit=REALISE_NODES,
                                          time_limit=seconds_left - (time.monotonic() - t0))
        if layout is not None:
            layouts.append(layout)
    if not layouts and result.solutions:
        # Counts that do not realise: decide the box with pipelines counted by type (exact).
        status, typed = solve_box_typed(problem, (a, b), node_limit=TYPED_NODES,
                                        time_limit=seconds_left - (time.monotonic() - t0),
                                        max_cells=TYPED_MAX_CELLS)
        record["typed"] = status
        if status == "infeasible":
            record["proved_by"] = TYPED_MODEL
            return [], "infeasible", record
        layouts = [typed] if typed is not None and layout_fits(typed, caps) else []
    if not layouts and result.solutions and job.units * limit <= EXACT_MAX_BINARIES:
        # Counts that do not realise, on a job small enough to decide cell by cell.
        status, exact = solve_box_exact(problem, (a, b), node_limit=CELL_NODES,
                                        time_limit=seconds_left - (time.monotonic() - t0))
        record["exact"] = status
        if status == "infeasible":
            record["proved_by"] = CELL_MODEL
            return [], "infeasible", record
        layouts = [exact] if exact is not None else []
    # Solver output is checked, not trusted (SCIP 10's presolve has returned "solutions" that
    # overfill a minipod): a layout that does not fit is dropped, never realised.
    layouts = [lay for lay in layouts if layout_fits(lay, caps)]
    record["realised"] = bool(layouts)
    cells = [cells_from_layout(lay, pool, job, alpha) for lay in layouts]
    return cells, "found" if cells else "open", record


def layout_fits(layout: list[list[str]], caps: dict[str, int]) -> bool:
    """Whether every cell of a (stage, pipeline) -> minipod layout names a minipod and no
    minipod holds more cells than it has units."""
    used: dict[str, int] = {}
    for row in layout:
        for pod in row:
            used[pod] = used.get(pod, 0) + 1
    return all(pod in caps and n <= caps[pod] for pod, n in used.items())


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
