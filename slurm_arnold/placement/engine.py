"""``place``: run one placement algorithm over a topology and a set of free nodes."""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

from slurm_arnold.errors import InfeasibleError
from slurm_arnold.placement.bands import band_layout, exact_band_layout
from slurm_arnold.placement.baselines import (
    BASELINES,
    aligned_cells,
    baseline_cells,
    block_rule,
    free_by_leaf,
)
from slurm_arnold.placement.bounds import BoxJudge, box_costs
from slurm_arnold.placement.box import cells_from_layout, layout_fits, solve_box_cells
from slurm_arnold.placement.job import JobShape
from slurm_arnold.placement.plan import Cell, Metrics, Placement, cells_from_rank_order, measure
from slurm_arnold.placement.pool import Pool
from slurm_arnold.topology import Topology

if TYPE_CHECKING:
    from slurm_arnold.placement.dominate import Choice
    from slurm_arnold.placement.weights import TierWeights

OFFLINE_ALGOS = ("mip", *BASELINES)
#: With "slurm": the nodes slurmctld itself would choose (live only).
ALGOS = (*OFFLINE_ALGOS, "slurm")



def check_alpha(alpha: float) -> float:
    """alpha must lie in [0, 1] (beta = 1 - alpha)."""
    if not 0.0 <= alpha <= 1.0 or math.isnan(alpha):
        raise InfeasibleError(f"--alpha {alpha} is outside [0, 1]; alpha + beta = 1")
    return alpha


def place(topology: Topology, free: Iterable[str], job: JobShape, *, algo: str = "mip",
          alpha: float = 0.5, time_limit: float | None = None, seed: int = 0,
          max_spreads: tuple[int, int] | None = None, lower_tiers: bool = True,
          weights: TierWeights | None = None) -> Placement:
    """Place ``job`` on the ``free`` nodes of ``topology`` with ``algo``.

    ``max_spreads`` (DP, PP; MIP only) keeps both spreads within those limits: the best
    weighted placement among those that are nowhere worse.

    ``lower_tiers`` (MIP only): choose the minipods for the tiers above them
    (``placement.regroup``) and arrange the cells inside each for the tiers below it
    (``placement.arrange``), weighing them by ``weights`` (``placement.weights``; default:
    from the default network at ``alpha``); the minipod spreads are the same either way.

    ``time_limit`` (default ``DEFAULT_TIME_LIMIT``) is a safety net for the whole placement
    (the search stops at ``1 - FINISH_SHARE`` of it when ``lower_tiers``): node limits decide
    when the MIP stops, so its answer does not depend on the machine's load unless this is hit.

    Raises ``InfeasibleError`` when the free nodes cannot hold the job (within the limits).
    """
    check_alpha(alpha)
    time_limit = DEFAULT_TIME_LIMIT if time_limit is None else time_limit
    free_list = topology.in_tree_order(free)
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
        return _place_mip(topology, free_list, job, alpha, time_limit, seed, t0, max_spreads,
                          lower_tiers, weights, retry_within=True)
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


def _group_local(cells: dict[Cell, list[str]], topology: Topology) -> bool:
    """Whether every cell's nodes (one TP group) share one group: domain or leaf."""
    return all(len(set(map(topology.group_of, nodes))) == 1 for nodes in cells.values())


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


#: Wall-clock safety net (s) of arnold place, arnold-sbatch and the binding loop. The work
#: limits below decide when the MIP stops; this binds only where they take longer: on
#: `arnold bench placement` two of the 27 12,500-node cases reach it (their `stopped` column;
#: wall p95 and max per scale in docs/benchmarks.md), smaller clusters stay far below.
DEFAULT_TIME_LIMIT = 10.0
#: Share of the time limit kept for what follows the search (choosing and arranging the
#: minipods, about a second on the 12,500-node bench cases), so that the limit bounds the
#: whole placement rather than the search alone.
FINISH_SHARE = 0.15
#: Stop after this many boxes in a row that SCIP could neither rule out nor fill: a later box
#: can still improve the answer (a bigger box is easier to fill) but no longer the bound.
STALL_BOXES = 2
#: Seeds of the random-fit warm start (fixed: the user's --seed must not change the answer).
START_SEEDS = (0, 1, 2)


def _place_mip(topology: Topology, free: list[str], job: JobShape, alpha: float,
               time_limit: float, seed: int, t0: float,
               max_spreads: tuple[int, int] | None = None,
               lower_tiers: bool = True, weights: TierWeights | None = None,
               retry_within: bool = False) -> Placement:
    del seed  # the MIP's answer must not depend on it; see START_SEEDS and SCIP_SEED
    if lower_tiers:
        time_limit *= 1 - FINISH_SHARE
    cap_dp, cap_pp = max_spreads or (math.inf, math.inf)

    def within(m: Metrics) -> bool:
        return m.max_dp_spread <= cap_dp and m.max_pp_spread <= cap_pp

    pool = Pool.build(topology, free, job)
    caps = pool.capacities()
    if sum(caps.values()) < job.units:
        raise InfeasibleError(
            f"the job needs {job.units} groups of {job.nodes_per_unit} nodes "
            f"{topology.group_kind()}, only {sum(caps.values())} fit in the free nodes; ask "
            "for fewer or wait"
        )
    # Warm starts: every baseline and both alignments; the result is never worse than these.
    starts: dict[str, dict[Cell, list[str]]] = {
        "dp-aligned": aligned_cells(pool, job, by="dp"),
        "pp-aligned": aligned_cells(pool, job, by="pp"),
    }
    by_leaf = free_by_leaf(topology, free)
    for name in BASELINES:
        if name == "random-fit":
            for s in START_SEEDS:
                starts[f"random-fit/{s}"] = baseline_cells(name, topology, free, job, s)
        else:
            starts[name] = baseline_cells(name, topology, free, job, 0, by_leaf)
    scored = {name: measure(c, job, topology, alpha) for name, c in starts.items()}
    phases = {"baselines": time.monotonic() - t0}
    valid = [n for n in starts if _group_local(starts[n], topology) and within(scored[n])]
    if not valid:
        # Only with max_spreads: no start within them; SCIP's boxes below may still be.
        best_name, best_cells = "none", {}
        best = Metrics(0, 0, math.inf, 0)
    else:
        best_name = min(valid, key=lambda n: (scored[n].weighted_spread, n != "pp-aligned", n))
        best_cells, best = starts[best_name], scored[best_name]
    best_name = best_name.split("/")[0]

    # Walk the possible spreads (a, b) from the cheapest: the product bounds rule most of
    # them out; SCIP decides the rest, each within a node budget. The first box that
    # nothing rules out or fills is the dual bound.
    lb_dp, lb_pp = _lower_bounds(list(caps.values()), job)
    judge = BoxJudge(list(caps.values()), job.pp, job.columns)
    pairs = [(cost, a, b) for cost, a, b in box_costs(len(caps), alpha, best.weighted_spread)
             if lb_dp <= a <= cap_dp and lb_pp <= b <= cap_pp]
    # Bands first: the cheapest (a, b) the (Lagrangian) bound allows that a band layout
    # reaches. Boxes are judged only when reached, so a good band layout saves judging the
    # many boxes above it.
    for cost, a, b in pairs:
        if cost >= best.weighted_spread - 1e-9 or time.monotonic() - t0 > time_limit:
            break
        if judge.ruled_out_by(a, b, integral=False) is not None:
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
    # counts that we realise, or runs out of nodes (the first such box bounds the gap).
    dual = best.weighted_spread
    boxes: list[dict[str, object]] = []
    proofs: dict[str, int] = {}
    open_box: dict[str, float] | None = None
    open_in_a_row = 0
    stopped = "proven"
    for cost, a, b in pairs:
        if cost >= best.weighted_spread - 1e-9:
            break
        left = time_limit - (time.monotonic() - t0)
        if left <= 0.05 or open_in_a_row >= STALL_BOXES:
            if cost < dual:
                dual, open_box = cost, {"dp_spread": a, "pp_spread": b, "cost": cost}
            stopped = "time limit" if left <= 0.05 else "stalled"
            break
        why = judge.ruled_out_by(a, b)
        if why is not None:
            proofs[why] = proofs.get(why, 0) + 1
            continue
        found, outcome, record = [], "open", {}
        if not boxes:
            # The first box no bound rules out: if nothing decides it, it bounds the gap, and
            # a layout in it closes the gap. Bands are tried first, thoroughly, once per
            # placement (their work is capped in bands.py); on the bench SCIP's count model
            # never proved such a box empty (`proved_by` lists only the product bounds).
            started = time.monotonic()
            layout = exact_band_layout(caps, job.pp, job.columns, a, b)
            if layout is not None and layout_fits(layout, caps):
                found, outcome = [cells_from_layout(layout, pool, job, alpha)], "bands"
                record = {"a": a, "b": b, "cost": cost, "status": "bands",
                          "seconds": round(time.monotonic() - started, 3)}
        if outcome != "bands":
            found, outcome, record = solve_box_cells((cost, a, b), caps, pool, job, alpha,
                                                time_limit - (time.monotonic() - t0))
        boxes.append(record)
        if outcome == "infeasible":
            why = str(record["proved_by"])
            proofs[why] = proofs.get(why, 0) + 1
            continue
        if cost < dual:
            dual, open_box = cost, {"dp_spread": a, "pp_spread": b, "cost": cost}
        better = [(c, m) for c, m in ((cells, measure(cells, job, topology, alpha))
                                      for cells in found)
                  if m.weighted_spread < best.weighted_spread - 1e-9 and within(m)]
        if better:
            best_cells, best = better[0]
            best_name = "bands (exact)" if outcome == "bands" else "mip"
            break
        open_in_a_row += 1
        stopped = "node limit"
    phases["scip"] = time.monotonic() - t0 - sum(phases.values())
    if not best_cells:
        raise InfeasibleError(f"no placement keeps DP spread <= {cap_dp} and PP spread <= "
                              f"{cap_pp}")
    # The tiers above and below the minipod (the minipod spreads stay as they are, unless a
    # rival's nodes give a placement nowhere worse than any rival where ours is not).
    dominance: dict[str, object] | None = None
    if lower_tiers:
        # Imported here: it needs numpy, which arnold-sbatch's start-up must not pay for.
        from slurm_arnold.placement.arrange import arrange
        from slurm_arnold.placement.regroup import regroup
        from slurm_arnold.placement.weights import default_weights

        weights = weights or default_weights(topology, alpha)
        # Which minipods, for the tiers above them; then inside them, for the tiers below.
        best_cells = regroup(best_cells, pool, weights)

        rivals = {n: starts[n] for n in valid}
        if topology.domains:
            # Slurm's own answer on NVLink domains, one TP group per segment, as users ask.
            slurm_nodes = block_rule(topology, free, job.nodes, job.nodes_per_unit)
            if slurm_nodes is not None:
                rivals["slurm-block"] = cells_from_rank_order(slurm_nodes, job)
        references = list(rivals.values())
        best_cells = arrange(best_cells, pool, job, alpha, weights, references)
        if topology.domains:
            from slurm_arnold.placement.dominate import dominant, rival_regions, rival_vectors

            def relayout(cells: Mapping[Cell, Sequence[str]]) -> dict[Cell, list[str]]:
                own = {c: list(n) for c, n in cells.items()}
                return arrange(regroup(own, pool, weights), pool, job, alpha, weights,
                               references)
            # The rivals an admin compares with are Slurm's and the baselines; the MIP's own
            # aligned warm starts are no rival, but their nodes are candidates. Laying nodes
            # out keeps their minipod spreads, so candidates within max_spreads stay within.
            theirs = {n: c for n, c in rivals.items() if not n.endswith("-aligned")}
            rival_metrics = {n: scored[n] if n in scored else measure(c, job, topology, alpha)
                             for n, c in rivals.items()}
            sources = {n: c for n, c in rivals.items() if within(rival_metrics[n])}
            if theirs:
                # Band layouts in boxes looser than ours but no looser than the best rival's
                # minipod tier: more minipods to take fuller racks from, at no regret there.
                top = min(rival_metrics[n].weighted_spread for n in theirs)
                sources |= _looser_layouts(caps, pool, job, alpha, best.weighted_spread, top,
                                           (cap_dp, cap_pp))
            deadline = t0 + time_limit / (1 - FINISH_SHARE)
            # Last, and only while nothing is nowhere worse: the MIP again, on the free nodes
            # under the places where a rival beat us (it may find fuller racks there).
            vectors = rival_vectors(theirs, topology, weights)
            regions = rival_regions(best_cells, theirs, free, topology, weights,
                                    int(len(free) * REGION_SHARE),
                                    vectors) if retry_within else {}
            costly = {name: functools.partial(_place_within, topology, region, job, alpha,
                                              deadline, max_spreads, weights)
                      for name, region in list(regions.items())[:REGION_TRIES]}
            choice = dominant(best_cells, theirs, relayout, topology, weights, sources,
                              deadline=deadline, costly=costly, vectors=vectors)
            records = None
            if choice.regret_after > 0:
                choice, records = _win_back(
                    choice, list(vectors.values()), free, topology, weights, job, deadline,
                    lambda c: within(measure(c, job, topology, alpha)))
            if choice.source != "ours":
                best_cells, best = choice.cells, measure(choice.cells, job, topology, alpha)
                best_name = choice.source
                if stopped == "proven":  # a search stopped by its limits keeps saying so
                    stopped = "traded for the tiers the rivals won"
            dominance = choice.as_json() | (records or {})
    phases["arrange"] = time.monotonic() - t0 - sum(phases.values())
    dual = min(dual, best.weighted_spread)
    status = "optimal" if best.weighted_spread <= dual + 1e-9 else "gap"
    gap = (best.weighted_spread - dual) / best.weighted_spread if best.weighted_spread else 0.0
    info = {"source": best_name, "status": status, "dual_bound": dual, "boxes": boxes,
            "proved_by": proofs, "stopped": "proven" if status == "optimal" else stopped,
            "open_box": open_box if status == "gap" else None,
            "phase_seconds": {k: round(v, 4) for k, v in phases.items()},
            "boxes_ruled_out": len(judge.excluded), "dominance": dominance}
    return Placement("mip", job, alpha, best_cells, best, time.monotonic() - t0,
                     round(max(gap, 0.0), 6), dual, info)


#: Band layouts in looser boxes that ``placement.dominate`` may lay out (the cheapest boxes
#: first). On `arnold bench placement --nvl` (its 24 cases; development runs with this set to
#: 0, 3 and 99) every box up to the rivals' gave the best summed objective (ours / block rule
#: 0.919 at 100k GPUs, 0.844 on the 30k trees, against 0.932 and 0.881 with none) but 2.7 x
#: the wall p95 at 100k; three gave most of it (0.925, 0.848) at 1.6 x.
LOOSER_BOXES = 3


#: Largest share of the free nodes a rival's region (``placement.dominate.rival_regions``)
#: may hold for the MIP to be run again inside it. On `arnold bench placement --nvl` (its 24
#: cases, the only NVLink-domain clusters there are) the regions that won a tier back held a
#: quarter of the free nodes; those holding 60% or more gave the MIP's own answer again and
#: each cost as long as the first search (8-9 s at 100k GPUs).
REGION_SHARE = 0.5
#: The smallest regions tried, and the safety net (s) of each search there: on the same
#: bench the smallest won a tier back in 1.2 s; on its random trees two regions cost 6.9 s in
#: one case and won nothing (a development run with this set to 2, on a machine then about
#: 2.4 x slower than for docs/benchmarks.md's run).
REGION_TRIES = 1
REGION_SECONDS = 2.0


#: Largest tier model (``placement.tiermip``: its n, r and c variables) built, and SCIP's
#: work on it: branch-and-bound nodes times variables (a node of a bigger model costs more).
#: Work, not seconds, decides when SCIP gives up, so a busy machine gets the same answer.
#: From the random trees of `arnold bench placement --nvl` and development runs on more of
#: them: models of 120-700 variables were solved or proven infeasible within 25 nodes but
#: one; models of 1,085-2,042 (PP 8 on 200 racks; the 10k-GPU bench case that still loses a
#: tier has 1,397) found nothing in 30 s of SCIP, whatever its branching rule.
TIER_MAX_VARS = 1_000
TIER_WORK = 250_000
#: Safety net (s) for the tier model alone, below the placement's own: on one of the random
#: trees of `arnold bench placement --nvl` (the 13th) its nodes cost 50 ms each (5 ms
#: elsewhere) and the work limit took 9.4 s, all the placement's time, for no answer (a
#: development run without this net, on the slower machine of the comment above).
TIER_SECONDS = 2.0


def _win_back(choice: Choice, vectors: Sequence[Sequence[float]], free: list[str],
              topology: Topology, weights: TierWeights, job: JobShape, deadline: float,
              allowed: Callable[[dict[Cell, list[str]]], bool]
              ) -> tuple[Choice, dict[str, object] | None]:
    """``choice``, or a placement nowhere worse than any rival, if ``allowed`` (max_spreads):
    the first stage packing (``placement.stagepack``) that is, else the stages placed one by
    one under DP caps (``placement.stagemip``), else what the tier model
    (``placement.tiermip``) finds, its pipelines moved into place unit by unit where they
    still miss a bar (``placement.repair``), else the packing nearest the bars so repaired;
    with the records of the steps that ran (``stage_models``, ``tier_model``; None: none
    did). ``vectors``: the rivals' tier vectors (``dominate.rival_vectors``)."""
    from slurm_arnold.placement.dominate import Choice, regret, tier_vector
    from slurm_arnold.placement.plan import tier_places
    from slurm_arnold.placement.repair import repair
    from slurm_arnold.placement.stagemip import place_stages
    from slurm_arnold.placement.stagepack import packings, weighted_tiers
    from slurm_arnold.placement.tiermip import (
        TierProblem,
        cells_from_domain_layout,
        layout_from_tier_counts,
        nodes_by_domain,
        solve_tiers,
    )
    from slurm_arnold.topology import spread_tiers

    def domain_of(n: str) -> str:
        return topology.domains.get(n, n)
    wheres = [where for _, where in tier_places(topology)]
    nodes_of = nodes_by_domain(free, domain_of, wheres)
    if nodes_of is None:
        return choice, None
    bars = [min(column) for column in zip(*vectors, strict=True)]
    names = spread_tiers(topology)
    pairs = [(weights[name].alpha, weights[name].beta) for name in names]
    m = job.nodes_per_unit
    problem = TierProblem.of_free(nodes_of, wheres, pairs, bars, job.pp, job.columns, m)
    # Tree order: the order of the free nodes, which is the topology's.
    order = list(nodes_of)

    def settled(name: str, cells: dict[Cell, list[str]] | None) -> Choice | None:
        if cells is None or not allowed(cells):
            return None
        after = regret(tier_vector(cells, topology, weights), vectors)
        return Choice(name, cells, choice.regret_before, after) if after == 0 else None

    def realise(counts: Sequence[dict[str, int]]) -> dict[Cell, list[str]]:
        return cells_from_domain_layout(layout_from_tier_counts(counts, order), nodes_of, m)

    def fixed(counts: Sequence[dict[str, int]]) -> dict[Cell, list[str]] | None:
        # The counts' DP spreads are exact; where the pipelines lined up miss a bar, units move.
        return repair(realise(counts), free, domain_of, wheres, bars, pairs, m,
                      deadline=deadline)

    nearest: tuple[float, str, list[dict[str, int]]] | None = None
    for name, counts in packings(problem, names):
        if time.monotonic() > deadline:
            break
        excess = sum(max(0.0, v - b) for v, b in zip(weighted_tiers(problem, counts), bars,
                                                     strict=True))
        if excess <= 1e-9 and (won := settled(name, realise(counts))):
            return won, None
        if nearest is None or excess < nearest[0]:
            nearest = (excess, name, counts)
    run = place_stages(problem, deadline=deadline) if time.monotonic() < deadline else None
    if run is not None and run.counts is not None and (
            won := settled("stage packing (each stage by its own MIP)", realise(run.counts))):
        return won, {"stage_models": run.as_json()}
    records: dict[str, object] | None = {"stage_models": run.as_json()} if run else None
    if problem.size() <= TIER_MAX_VARS and deadline > time.monotonic():
        result = solve_tiers(problem, node_limit=max(1, TIER_WORK // problem.size()),
                             time_limit=min(deadline - time.monotonic(), TIER_SECONDS))
        records = (records or {}) | {"tier_model": {
            "status": result.status, "proven_impossible": result.proven_impossible,
            "nodes": result.nodes, "seconds": round(result.seconds, 3),
            "variables": problem.size()}}
        if result.proven_impossible:
            return choice, records
        if result.counts is not None and (won := settled("the tier model",
                                                         fixed(result.counts))):
            return won, records
    if nearest is not None and (won := settled(f"{nearest[1]} with units moved",
                                               fixed(nearest[2]))):
        return won, records
    return choice, records


def _place_within(topology: Topology, region: list[str], job: JobShape, alpha: float,
                  deadline: float, max_spreads: tuple[int, int] | None,
                  weights: TierWeights) -> dict[Cell, list[str]] | None:
    """The MIP's placement on the ``region``'s nodes alone, its tiers and rivals' there
    weighed as everywhere (but not searched within regions again); None when the region
    cannot hold the job or no time is left before ``deadline``."""
    t0 = time.monotonic()
    if deadline <= t0:
        return None
    try:
        return _place_mip(topology, region, job, alpha, min(deadline - t0, REGION_SECONDS), 0,
                          t0, max_spreads, True, weights).cells
    except InfeasibleError:
        return None


def _looser_layouts(caps: dict[str, int], pool: Pool, job: JobShape, alpha: float,
                    above: float, upto: float,
                    cap: tuple[float, float]) -> dict[str, dict[Cell, list[str]]]:
    """Cells of band layouts in the cheapest ``LOOSER_BOXES`` spread boxes (a, b) costing more
    than ``above`` and at most ``upto`` (within ``cap``) that bands fill, named ``bands AxB``."""
    out: dict[str, dict[Cell, list[str]]] = {}
    for cost, a, b in box_costs(len(caps), alpha, upto + 1e-6):
        if len(out) >= LOOSER_BOXES:
            break
        if cost <= above + 1e-9 or a > cap[0] or b > cap[1]:
            continue
        layout = band_layout(caps, job.pp, job.columns, a, b)
        if layout is not None:
            out[f"bands {a}x{b}"] = cells_from_layout(layout, pool, job, alpha)
    return out
