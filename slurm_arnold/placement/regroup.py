"""Choose which minipods a placement uses so the tiers above them stay tight.

The MIP decides how the job's cells are laid over *some* minipods (which stage and pipeline
each holds), and its spreads count distinct minipods, so any minipods with room for the
cells each holds give the same minipod spreads. On a tree with tiers above the minipod
(super-spine groups under the core, pods of pods), which minipods those are decides the
spreads up there: the MIP takes the largest minipods wherever they are, so a job can cross
several groups where one would hold it.

``regroup`` relabels the minipods: it fills the fewest groups of the tier just above the
minipod that can hold the job's minipods (greedily: the group that takes the most cells
first, each minipod to the tightest one there that holds it, the largest first), and keeps
the result only where it lowers the weighted spread summed over the upper tiers
(``placement.weights``); otherwise the MIP's own minipods stay. It runs before
``placement.arrange``, which then works inside whichever minipods were chosen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from slurm_arnold.placement.plan import Cell
from slurm_arnold.placement.pool import Pool
from slurm_arnold.placement.weights import TierWeights
from slurm_arnold.topology import Topology, tiers


def upper_tiers(topology: Topology) -> list[tuple[str, int]]:
    """The tiers above the minipod that more than one switch forms: (name as
    ``blocks.tiers`` names it, position in ``Topology.path_of``), nearest first."""
    names = tiers(topology)
    paths = minipod_paths(topology).values()
    return [(names[k], k) for k in range(topology.minipod_level + 1, len(names))
            if len({_at(path, k) for path in paths}) > 1]


def minipod_paths(topology: Topology) -> dict[str, list[str]]:
    """Each minipod's path of switches (one of its nodes'), in tree order."""
    first: dict[str, str] = {}
    for node in topology.nodes:
        first.setdefault(topology.minipod_of(node), node)
    return {pod: topology.path_of(node) for pod, node in first.items()}


def _at(path: Sequence[str], k: int) -> str:
    return path[min(k, len(path) - 1)]


def upper_score(pods: Mapping[Cell, str], paths: Mapping[str, Sequence[str]],
                weights: TierWeights, upper: Sequence[tuple[str, int]]) -> float:
    """The weighted spread summed over the ``upper`` tiers of cells placed in ``pods``
    (``paths``: ``minipod_paths``)."""
    total = 0.0
    for name, k in upper:
        rows: dict[int, set[str]] = {}
        cols: dict[int, set[str]] = {}
        for (pp, col), pod in pods.items():
            group = _at(paths[pod], k)
            rows.setdefault(pp, set()).add(group)
            cols.setdefault(col, set()).add(group)
        total += weights[name].of(max(map(len, rows.values()), default=0),
                                  max(map(len, cols.values()), default=0))
    return round(total, 6)


def regroup(cells: dict[Cell, list[str]], pool: Pool,
            weights: TierWeights) -> dict[Cell, list[str]]:
    """``cells`` moved, minipod by minipod, to minipods that share fewer upper groups (module
    docstring); the same cells per minipod, so the minipod spreads are unchanged."""
    topology = pool.topology
    upper = upper_tiers(topology)
    if not upper or not cells:
        return cells
    paths = minipod_paths(topology)
    caps = pool.capacities()
    group_of = {pod: _at(paths[pod], upper[0][1]) for pod in caps}
    pod_of = {cell: topology.minipod_of(nodes[0]) for cell, nodes in cells.items()}
    used: dict[str, int] = {}
    for pod in pod_of.values():
        used[pod] = used.get(pod, 0) + 1
    mapping = _pack(used, caps, group_of)
    if mapping is None or all(a == b for a, b in mapping.items()):
        return cells
    moved = {cell: mapping[pod] for cell, pod in pod_of.items()}
    if upper_score(moved, paths, weights, upper) >= \
            upper_score(pod_of, paths, weights, upper) - 1e-9:
        return cells
    out: dict[Cell, list[str]] = {}
    units = {pod: pool.units_in(pod) for pod in set(mapping.values())}
    taken = dict.fromkeys(units, 0)
    for cell in sorted(cells):
        target = mapping[pod_of[cell]]
        out[cell] = list(units[target][taken[target]])
        taken[target] += 1
    return out


def _pack(used: Mapping[str, int], caps: Mapping[str, int],
          group_of: Mapping[str, str]) -> dict[str, str] | None:
    """A one-to-one map of the used minipods to minipods with room for their cells, filling
    the fewest groups greedily; None when the greedy packing gets stuck."""
    members: dict[str, list[str]] = {}
    for pod in caps:  # tree order inside a group, largest first overall (Pool.capacities)
        members.setdefault(group_of[pod], []).append(pod)
    left = sorted(used, key=lambda p: (-used[p], p))
    free = {g: sorted(pods, key=lambda p: caps[p]) for g, pods in members.items()}
    mapping: dict[str, str] = {}
    while left:
        best: tuple[int, str, dict[str, str]] | None = None
        for group, pods in free.items():
            trial = _fit(left, used, caps, pods)
            hosted = sum(used[p] for p in trial)
            if hosted and (best is None or hosted > best[0]):
                best = (hosted, group, trial)
        if best is None:
            return None
        _, group, trial = best
        mapping.update(trial)
        free[group] = [p for p in free[group] if p not in set(trial.values())]
        left = [p for p in left if p not in trial]
    return mapping


def _fit(left: Sequence[str], used: Mapping[str, int], caps: Mapping[str, int],
         pods: Sequence[str]) -> dict[str, str]:
    """The used minipods (largest first) that one group's free minipods (smallest first) take,
    each the tightest that holds it."""
    available = list(pods)
    out: dict[str, str] = {}
    for pod in left:
        home = next((q for q in available if caps[q] >= used[pod]), None)
        if home is not None:
            out[pod] = home
            available.remove(home)
    return out
