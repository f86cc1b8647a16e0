"""A constructive placement for given spread limits (a, b): bands.

*Row bands*: split the PP stages into at most b bands of consecutive stages. Each band holds
all D' pipelines for its stages and is cut, by pipelines, over at most a minipods (a minipod
with room for u units takes u // height pipelines of the band). A DP group (one stage) then
touches only its band's minipods (<= a) and a pipeline one minipod per band (<= b).

*Column bands*: the transpose. Split the pipelines into at most a bands; each band is cut, by
stages, over at most b minipods. A pipeline touches <= b minipods, a DP group one per band.

Band sizes are chosen greedily, largest first: the biggest band the remaining minipods can
still hold. Minipods for a band are picked best-fit (one minipod if one can hold the band,
the tightest such; otherwise the roomiest ones). It is fast and often reaches the lower bound,
so the solver is left with the cases it cannot settle.

``exact_band_layout`` is the thorough version, for a box the count model leaves open: for each
way to split the stages into at most b bands (most even first), a small MIP chooses every
band's minipods and pipelines together (a generalised assignment: which of at most a minipods,
how many pipelines each, minipods shared between bands by capacity), so a band is never
starved by a greedy choice made for an earlier one. The same for pipeline bands where the
pipelines have few splits. SCIP's node limits bound its work, so the answer does not depend
on the machine's load.
"""

from __future__ import annotations

from collections.abc import Iterator


def _pick(avail: dict[str, int], band: int, span: int, limit: int) -> dict[str, int] | None:
    """Minipods (at most ``limit``) and how many of the band's ``span`` lines each takes,
    for a band ``band`` lines thick; ``None`` when they cannot hold it."""
    lines = {p: min(span, u // band) for p, u in avail.items() if u // band > 0}
    single = [p for p, k in lines.items() if k >= span]
    if single:
        tightest = min(single, key=lambda p: avail[p])
        return {tightest: span}
    roomiest = sorted(lines, key=lambda p: -lines[p])[:limit]
    if sum(lines[p] for p in roomiest) < span:
        return None
    picked: dict[str, int] = {}
    left = span
    for p in roomiest:
        take = min(lines[p], left)
        picked[p] = take
        left -= take
        if left == 0:
            break
    return picked


def _bands(caps: dict[str, int], thick: int, span: int, per_band: int,
           max_bands: int) -> list[tuple[int, dict[str, int]]] | None:
    """Split ``thick`` lines into at most ``max_bands`` bands, each spanning ``span`` cut over
    at most ``per_band`` minipods; returns (band thickness, minipod -> lines) per band."""
    avail = dict(caps)
    bands: list[tuple[int, dict[str, int]]] = []
    left = thick
    while left > 0:
        if len(bands) == max_bands:
            return None
        # the thickest band the remaining room can hold, no thinner than an even share
        floor = -(-left // (max_bands - len(bands)))
        chosen = None
        for size in range(left, floor - 1, -1):
            picked = _pick(avail, size, span, per_band)
            if picked is not None:
                chosen = (size, picked)
                break
        if chosen is None:
            return None
        size, picked = chosen
        for p, k in picked.items():
            avail[p] -= size * k
        bands.append(chosen)
        left -= size
    return bands


def band_layout(caps: dict[str, int], stages: int, columns: int, a: int,
                b: int) -> list[list[str]] | None:
    """A (stage, pipeline) -> minipod layout with DP spread <= a and PP spread <= b, or
    ``None`` when neither band construction finds one."""
    rows = _bands(caps, stages, columns, a, b)
    if rows is not None:
        return _fill(rows, stages, columns, transpose=False)
    cols = _bands(caps, columns, stages, b, a)
    if cols is not None:
        return _fill(cols, stages, columns, transpose=True)
    return None


def _fill(bands: list[tuple[int, dict[str, int]]], stages: int, columns: int,
          transpose: bool) -> list[list[str]]:
    """Lay bands out: each band is ``size`` lines thick and cut across into runs per minipod.
    Row bands run along stages; with ``transpose`` they run along pipelines."""
    layout = [[""] * columns for _ in range(stages)]
    start = 0
    for size, picked in bands:
        across = 0
        for pod, width in picked.items():
            for line in range(start, start + size):
                for cross in range(across, across + width):
                    if transpose:
                        layout[cross][line] = pod
                    else:
                        layout[line][cross] = pod
            across += width
        start += size
    return layout


#: Splits of the lines into bands tried by ``exact_band_layout`` (most even first), the SCIP
#: nodes each split's assignment may take and all of them together, and the (band, minipod)
#: pairs of all the models built (building and the root LP cost more than the nodes on big
#: clusters); past any of them a box is left open. Set so that every band layout the
#: exhaustive search found on `arnold bench placement`'s open boxes is still found (the bench's
#: proof rate shows it) while a search that finds nothing stays near a second there.
EXACT_SPLITS = 12
EXACT_NODES_PER_SPLIT = 300
EXACT_NODES = 600
EXACT_PAIRS = 600
#: A split's nodes shrink with the square of its (band, minipod) pairs (a node of a bigger
#: model costs more): 200 nodes at 200 pairs, never fewer than 20.
EXACT_WORK = 8_000_000


def splits(total: int, parts: int, limit: int) -> list[tuple[int, ...]] | None:
    """The ways to write ``total`` as at most ``parts`` positive band sizes (non-increasing),
    most even first; ``None`` when there are more than ``limit`` of them (too many to try)."""
    found: list[tuple[int, ...]] = []

    def walk(left: int, room: int, largest: int) -> Iterator[tuple[int, ...]]:
        if left == 0:
            yield ()
            return
        if room == 0:
            return
        for first in range(min(left, largest), 0, -1):
            if first * room < left:
                break
            for rest in walk(left - first, room - 1, first):
                yield (first, *rest)

    for split in walk(total, min(parts, total), total):
        found.append(split)
        if len(found) > limit:
            return None
    return sorted(found, key=lambda sizes: (sizes[0] - sizes[-1], len(sizes)))


def exact_band_layout(caps: dict[str, int], stages: int, columns: int, a: int, b: int, *,
                      max_splits: int = EXACT_SPLITS, node_budget: int = EXACT_NODES
                      ) -> list[list[str]] | None:
    """A layout with DP spread <= a and PP spread <= b built from bands, each band's minipods
    chosen exactly for one split of the lines into bands; ``None`` when no split tried within
    the node budget has one (which proves nothing: other layouts than bands may exist)."""
    budget = [node_budget]
    pairs = 0
    for thick, span, per_band, max_bands, transpose in (
            (stages, columns, a, b, False), (columns, stages, b, a, True)):
        options = splits(thick, max_bands, 50 * max_splits)
        if options is None:
            continue
        tried = 0
        for sizes in options:
            if tried == max_splits or budget[0] <= 0:
                break
            if not _each_band_fits(caps, sizes, span, per_band):
                continue
            pairs += len(sizes) * len(caps)
            if pairs > EXACT_PAIRS:
                break
            tried += 1
            bands = _assign_bands(caps, sizes, span, per_band, budget)
            if bands is not None:
                return _fill(bands, stages, columns, transpose=transpose)
    return None


def _each_band_fits(caps: dict[str, int], sizes: tuple[int, ...], span: int,
                    per_band: int) -> bool:
    """Whether every band alone finds its ``span`` lines in its best ``per_band`` minipods."""
    for size in set(sizes):
        lines = sorted((min(span, cap // size) for cap in caps.values()), reverse=True)
        if sum(lines[:per_band]) < span:
            return False
    return True


def _assign_bands(caps: dict[str, int], sizes: tuple[int, ...], span: int, per_band: int,
                  budget: list[int], *,
                  presolve: bool = True) -> list[tuple[int, dict[str, int]]] | None:
    """Minipods and lines for bands of the given sizes (SCIP, within ``budget[0]`` nodes,
    which it spends), checked against the constraints before it is returned."""
    from pyscipopt import Model, quicksum

    from slurm_arnold.placement.mip import SCIP_SEED

    pods = list(caps)
    bands = range(len(sizes))
    m = Model("arnold-bands")
    m.hideOutput()
    use = {(g, p): m.addVar(f"use[{g},{p}]", vtype="B") for g in bands for p in pods}
    lines = {(g, p): m.addVar(f"lines[{g},{p}]", vtype="I", lb=0,
                              ub=min(span, caps[p] // sizes[g])) for g in bands for p in pods}
    for g in bands:
        m.addCons(quicksum(use[g, p] for p in pods) <= per_band, name=f"BandSpread({g})")
        m.addCons(quicksum(lines[g, p] for p in pods) == span, name=f"BandComplete({g})")
        # Implied by the two families around it, but it tells the LP which minipods must be
        # used together: on the bench's hard cases it finds more bands in fewer nodes.
        m.addCons(quicksum(min(span, caps[p] // sizes[g]) * use[g, p] for p in pods) >= span,
                  name=f"BandCover({g})")
        for p in pods:
            m.addCons(lines[g, p] <= min(span, caps[p] // sizes[g]) * use[g, p],
                      name=f"BandUses({g},{p})")
        if g + 1 < len(sizes) and sizes[g] == sizes[g + 1]:
            # Bands of one size are interchangeable: order them by the minipods they use.
            m.addCons(quicksum((len(pods) - i) * use[g, p] for i, p in enumerate(pods))
                      >= quicksum((len(pods) - i) * use[g + 1, p] for i, p in enumerate(pods)),
                      name=f"BandOrder({g})")
    for p in pods:
        m.addCons(quicksum(sizes[g] * lines[g, p] for g in bands) <= caps[p],
                  name=f"Capacity({p})")
    work_nodes = max(20, EXACT_WORK // (len(sizes) * len(pods)) ** 2)
    m.setParam("limits/nodes", min(EXACT_NODES_PER_SPLIT, work_nodes, budget[0]))
    m.setParam("limits/solutions", 1)
    m.setParam("randomization/randomseedshift", SCIP_SEED)
    if not presolve:
        m.setParam("presolving/maxrounds", 0)
    m.optimize()
    budget[0] -= max(1, m.getNNodes())
    if m.getNSols() == 0:
        return None
    sol = m.getBestSol()
    out = []
    for g in bands:
        picked = {p: round(m.getSolVal(sol, lines[g, p])) for p in pods}
        out.append((sizes[g], {p: k for p, k in picked.items() if k > 0}))
    used = {p: sum(size * picked.get(p, 0) for size, picked in out) for p in pods}
    if all(used[p] <= caps[p] for p in pods) and all(
            sum(picked.values()) == span and len(picked) <= per_band for _, picked in out):
        return out
    # SCIP 10's presolve can return a "solution" that breaks the original constraints (seen
    # on a 4-minipod case whose true answer is infeasible: it overfilled a minipod). Never
    # trust it: solve once more without presolving, which answers such cases correctly.
    if presolve and budget[0] > 0:
        return _assign_bands(caps, sizes, span, per_band, budget, presolve=False)
    return None
