"""Arrange a placement inside its minipods so the tiers below them stay tight too.

The MIP decides which minipod holds each cell of the communication matrix; that fixes the
spreads it optimises (distinct minipods per DP and PP group). Inside a minipod any assignment
of its cells to its free units keeps those spreads, but not the spreads counted at the tiers
below (leaf switches, and the NVLink domains where the topology has them): a DP group laid
along one pipeline after another crosses many racks where Slurm's block rule, filling racks in
rank order, crosses few.

``arrange`` tries a few arrangements, first one rule for every minipod, then each minipod's
own best given the others, and keeps the best by the sum over the lower tiers of the weighted
spread (alpha_t x DP + beta_t x PP, ``placement.weights``: by default from the links above
each tier, so on a non-blocking tree the tiers below the minipod weigh alike), then by those
spreads from the tier nearest the minipod down, then by whole NVLink domains left free, then
by the order tried (the MIP's own arrangement first). The answer is never worse, by that
measure, than the MIP's own.

An arrangement is a unit order and a tile height ``r``. Units: the minipod's fullest leaf
first, inside it the fullest domain first (or, the other variant, partly used domains before
whole ones, which keeps whole domains for other jobs). Cells: tiles of ``r`` stages, in each
tile pipeline after pipeline, so a rack of ``u`` units holds about ``u / r`` pipelines of ``r``
stages: ``r = 1`` fills racks along DP groups (Slurm's rank order), ``r = PP`` along pipelines.
Tiles run from the first stage down, and those shorter than a minipod's run of stages also from
the last up: stages that share minipods then take turns at the fullest leaves instead of one
stage getting every minipod's leftovers.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from slurm_arnold.placement.job import JobShape
from slurm_arnold.placement.plan import Cell, tier_places, worst_spreads
from slurm_arnold.placement.pool import Pool
from slurm_arnold.placement.weights import TierWeight, TierWeights, default_weights
from slurm_arnold.topology import Topology, tiers

#: Tile heights always tried (besides every divisor of PP): small tiles matter most, since a
#: rack holds few units.
SMALL_HEIGHTS = 8
#: Rounds of improving one minipod at a time after the best common rule.
DESCENT_PASSES = 3


def lower_tiers(topology: Topology) -> list[tuple[str, Callable[[str], str]]]:
    """The tiers below the minipod, nearest the minipod first: (name as ``blocks.tiers``
    names it, node -> place); the NVLink domain last where it is not the leaf itself."""
    path_names = tiers(topology)
    below = set(path_names[:topology.minipod_level])
    places = tier_places(topology)
    # Domains that are not the leaves themselves are not on the path: they come last.
    return [*reversed([(n, where) for n, where in places if n in below]),
            *[(n, where) for n, where in places if n not in path_names]]


def tile_heights(pp: int) -> list[int]:
    """Tile heights tried: 1 .. SMALL_HEIGHTS and every divisor of ``pp`` (``pp`` included)."""
    return sorted({r for r in range(1, min(pp, SMALL_HEIGHTS) + 1)}
                  | {r for r in range(1, pp + 1) if pp % r == 0})


def lower_tier_score(cells: Mapping[Cell, Sequence[str]], weights: TierWeights,
                     lower: Sequence[tuple[str, Callable[[str], str]]]) -> tuple[float, ...]:
    """alpha_t x worst DP spread + beta_t x worst PP spread at each of the ``lower`` tiers."""
    out = []
    for name, where in lower:
        dp, pp, _ = worst_spreads(cells, where)
        out.append(weights[name].of(dp, pp))
    return tuple(out)


def _unit_order(pool: Pool, pod: str, whole_last: bool) -> list[list[str]]:
    """The minipod's units, fullest leaf (and tier below the minipod) first; inside a leaf
    fullest group first, or partly used domains first when ``whole_last``."""
    topology, m = pool.topology, pool.nodes_per_unit
    groups = pool.groups[pod]
    units = {g: len(nodes) // m for g, nodes in groups.items()}

    def path(group: str) -> tuple[str, ...]:
        node = groups[group][0]
        full = topology.path_of(node)
        return tuple(full[k] for k in range(topology.minipod_level - 1, -1, -1))

    paths = {g: path(g) for g in groups}
    totals: dict[tuple[str, ...], int] = {}
    for g, p in paths.items():
        for depth in range(1, len(p) + 1):
            totals[p[:depth]] = totals.get(p[:depth], 0) + units[g]
    tree_order = {g: i for i, g in enumerate(groups)}

    def key(group: str) -> tuple[object, ...]:
        p = paths[group]
        fullness = tuple(-totals[p[:depth]] for depth in range(1, len(p) + 1))
        # Same fullness: keep the places of one switch together, in tree order.
        own = (group in pool.whole, -units[group]) if whole_last else (-units[group],)
        return (*sum(((f, p[i]) for i, f in enumerate(fullness)), ()), *own,
                tree_order[group])

    out: list[list[str]] = []
    for group in sorted(groups, key=key):
        nodes = groups[group]
        out.extend(nodes[i * m:(i + 1) * m] for i in range(units[group]))
    return out


@dataclass
class _Variant:
    """One arrangement of one minipod's cells, and what it adds to each group's spread at
    each lower tier (a place below a minipod belongs to that minipod, so a group's spread at
    such a tier is the sum over minipods)."""

    units: list[list[str]]  # the units, in the order the cells take them
    order: np.ndarray  # the minipod's cells (indices into its list), in that order
    rows: np.ndarray  # tiers x stages: places each DP group touches here
    cols: np.ndarray  # tiers x pipelines: places each pipeline touches here
    whole_touched: int


class _Places:
    """Integer ids of every node's place at each lower tier (computed once per node)."""

    def __init__(self, pool: Pool, lower: Sequence[tuple[str, Callable[[str], str]]]) -> None:
        self.pool = pool
        self.tiers = lower
        self.ids: list[dict[str, int]] = [{} for _ in lower]
        self.node: dict[str, tuple[int, ...]] = {}

    def of(self, units: Sequence[Sequence[str]]) -> np.ndarray:
        """tiers x units x nodes per unit: the place ids of ``units``' nodes."""
        out = np.empty((len(self.tiers), len(units), self.pool.nodes_per_unit), dtype=np.int64)
        for u, nodes in enumerate(units):
            for k, node in enumerate(nodes):
                ids = self.node.get(node)
                if ids is None:
                    ids = tuple(table.setdefault(where(node), len(table))
                                for table, (_, where) in zip(self.ids, self.tiers, strict=True))
                    self.node[node] = ids
                out[:, u, k] = ids
        return out

    def whole_touched(self, units: Sequence[Sequence[str]]) -> int:
        """Whole free domains that ``units`` touch."""
        if not self.pool.whole:
            return 0
        domains = self.pool.topology.domains
        return len({domains.get(n) for nodes in units for n in nodes} & self.pool.whole)


def _distinct(groups: np.ndarray, places: np.ndarray, size: int) -> np.ndarray:
    """Per group index 0..size-1, how many distinct places its entries have."""
    span = int(places.max()) + 1 if places.size else 1
    pairs = np.unique(groups * span + places)
    return np.bincount(pairs // span, minlength=size)


def _variant(units: list[list[str]], order: np.ndarray, rows_of: np.ndarray,
             cols_of: np.ndarray, places: np.ndarray, job: JobShape,
             whole_touched: int) -> _Variant:
    """The variant where the minipod's cells, in ``order``, take ``units`` (whose place ids
    are ``places``, tiers x units x m) one by one."""
    m = places.shape[2]
    k = len(order)
    r = np.repeat(rows_of[order], m)
    c = np.repeat(cols_of[order], m)
    tiers = places.shape[0]
    rows = np.zeros((tiers, job.pp), dtype=np.int64)
    cols = np.zeros((tiers, job.columns), dtype=np.int64)
    for t in range(tiers):
        flat = places[t, :k, :].reshape(-1)
        rows[t] = _distinct(r, flat, job.pp)
        cols[t] = _distinct(c, flat, job.columns)
    return _Variant(units, order, rows, cols, whole_touched)


def _tile_order(rows_of: np.ndarray, cols_of: np.ndarray, r: int, snake: bool) -> np.ndarray:
    """The cells in tiles of ``r`` stages, pipeline after pipeline inside a tile; with
    ``snake`` every other tile runs its pipelines backwards, so consecutive tiles meet in one
    rack."""
    tile = rows_of // r
    col_key = np.where(snake & (tile % 2 == 1), -cols_of, cols_of)
    return np.lexsort((rows_of, col_key, tile))


def arrange(cells: dict[Cell, list[str]], pool: Pool, job: JobShape, alpha: float,
            weights: TierWeights | None = None,
            references: Sequence[Mapping[Cell, Sequence[str]]] = ()) -> dict[Cell, list[str]]:
    """``cells`` rearranged inside each minipod for the tiers below it (module docstring),
    weighed by ``weights`` (default: ``weights.default_weights`` at ``alpha``); every cell
    stays in its minipod, so the minipod spreads are unchanged. Before the weighted sum comes
    how many (reference, tier) pairs the arrangement is worse at than the ``references``
    (other placements of the same job: Slurm's block rule, the baselines), so where an
    arrangement nowhere worse than them exists among those tried, that kind wins."""
    topology = pool.topology
    lower = lower_tiers(topology)
    if not lower or not cells:
        return cells
    weights = weights or default_weights(topology, alpha)
    pairs: list[TierWeight] = [weights[name] for name, _ in lower]

    def regret(per_tier: Sequence[float]) -> int:
        return sum(1 for bar in bars for ours, theirs in zip(per_tier, bar, strict=True)
                   if ours > theirs + 1e-9)
    by_pod: dict[str, list[Cell]] = {}
    for cell, nodes in cells.items():
        by_pod.setdefault(topology.minipod_of(nodes[0]), []).append(cell)
    ids = _Places(pool, lower)

    def exact_tiers(c: Mapping[Cell, Sequence[str]]) -> tuple[float, ...]:
        """``lower_tier_score`` of ``c`` through the place ids (a node's places are looked up
        once, however many placements hold it)."""
        keys = list(c)
        units = [list(c[k]) for k in keys]
        v = _variant(units, np.arange(len(keys)), np.array([k[0] for k in keys]),
                     np.array([k[1] for k in keys]), ids.of(units), job, 0)
        return tuple(pairs[t].of(float(v.rows[t].max()), float(v.cols[t].max()))
                     for t in range(len(lower)))

    bars = [exact_tiers(ref) for ref in references]
    # Variant 0 of every minipod is what it had; the others are tried in the same order in
    # every minipod, so one index means one rule everywhere.
    variants: dict[str, list[_Variant]] = {}
    for pod, want in by_pod.items():
        rows_of = np.array([c[0] for c in want], dtype=np.int64)
        cols_of = np.array([c[1] for c in want], dtype=np.int64)
        own = [cells[c] for c in want]
        # The same tiles from the last stage down: where stages share a minipod the first
        # takes its fullest leaves, so which one goes first is the minipod's own choice.
        flipped = rows_of.max() - rows_of
        stage_count = len(np.unique(rows_of))
        mine = [_variant(own, np.arange(len(want)), rows_of, cols_of, ids.of(own), job,
                         ids.whole_touched(own))]
        for units in (_unit_order(pool, pod, True), _unit_order(pool, pod, False),
                      pool.units_in(pod)):
            units = units[:len(want)]
            places, touched = ids.of(units), ids.whole_touched(units)
            for r in tile_heights(job.pp):
                for snake in (False, True):
                    mine.append(_variant(units, _tile_order(rows_of, cols_of, r, snake),
                                         rows_of, cols_of, places, job, touched))
                    # Only tiles shorter than the minipod's run of stages take turns (a taller
                    # one interleaves them already); elsewhere the same variant stands in, so
                    # that an index still means one rule in every minipod.
                    mine.append(_variant(units, _tile_order(flipped, cols_of, r, snake),
                                         rows_of, cols_of, places, job, touched)
                                if r < stage_count else mine[-1])
        variants[pod] = mine

    def score(rows: np.ndarray, cols: np.ndarray, touched: int) -> tuple[object, ...]:
        per_tier = tuple(pairs[t].of(float(rows[t].max()), float(cols[t].max()))
                         for t in range(len(lower)))
        return regret(per_tier), sum(per_tier), per_tier, touched

    def totals(choice: Mapping[str, int]) -> tuple[np.ndarray, np.ndarray, int]:
        chosen = [variants[pod][v] for pod, v in choice.items()]
        return (np.sum([v.rows for v in chosen], axis=0),
                np.sum([v.cols for v in chosen], axis=0), sum(v.whole_touched for v in chosen))

    count = len(next(iter(variants.values())))
    # The best single rule for every minipod, then each minipod's own best given the others
    # (the totals move by one minipod's share, so a trial costs one subtraction and one sum).
    def everywhere(index: int) -> dict[str, int]:
        return {pod: index for pod in by_pod}

    best_index = min(range(count), key=lambda i: (score(*totals(everywhere(i))), i))
    choice = everywhere(best_index)
    rows, cols, touched = totals(choice)
    best = score(rows, cols, touched)
    for _ in range(DESCENT_PASSES):
        improved = False
        for pod in by_pod:
            old = variants[pod][choice[pod]]
            for v, new in enumerate(variants[pod]):
                trial = (rows - old.rows + new.rows, cols - old.cols + new.cols,
                         touched - old.whole_touched + new.whole_touched)
                trial_score = score(*trial)
                if trial_score < best:
                    best, (rows, cols, touched), old = trial_score, trial, new
                    choice[pod], improved = v, True
        if not improved:
            break
    out: dict[Cell, list[str]] = {}
    for pod, v in choice.items():
        chosen = variants[pod][v]
        want = by_pod[pod]
        out.update((want[i], list(unit)) for i, unit in zip(chosen.order, chosen.units,
                                                            strict=False))

    # The counts above add up each minipod's share, exact while every place below a minipod
    # lies inside it; a domain spanning minipods would break that, so the real spreads decide.
    def exact(c: Mapping[Cell, Sequence[str]]) -> tuple[int, float, tuple[float, ...]]:
        per_tier = exact_tiers(c)
        return regret(per_tier), sum(per_tier), per_tier

    return out if exact(out) <= exact(cells) else cells
