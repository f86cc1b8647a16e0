"""Placements remembered by shape: the same LPJ meets the same free-node pattern many times.

A placement's spreads depend only on which minipod each node sits under, and the placement
engine treats the free nodes of one leaf alike. So two pools are the same problem when some
mapping of leaves to leaves, keeping leaves of one minipod together, matches their free-node
counts: the key is each minipod's leaf counts (sorted), the minipods sorted. A placement is
remembered as, for each cell, "the k-th pool node of the j-th leaf of the i-th minipod" in
that canonical order, and realised on any pool with the same key, with the same metrics.
In a replay most of the engine's calls repeat a pattern already solved (an LPJ is tried at
every scheduling pass until it starts or is reserved, and pools differ by which leaf is fuller).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from slurm_arnold.placement import JobShape, Placement, place
from slurm_arnold.placement.plan import Cell
from slurm_arnold.topology import Topology

_Key = tuple[tuple[tuple[int, ...], ...], JobShape]
_Where = tuple[int, int, int]  # (minipod position, leaf position, k) in canonical order


class PlacementMemo:
    """``place`` with a memory keyed by the pool's canonical shape and the job's shape."""

    def __init__(self, topology: Topology, *, algo: str, alpha: float,
                 time_limit: float) -> None:
        self.topology = topology
        self.algo, self.alpha, self.time_limit = algo, alpha, time_limit
        leaves = topology.leaves()
        leaf_index = {leaf: i for i, leaf in enumerate(leaves)}
        pods = topology.minipods()
        pod_index = {pod: i for i, pod in enumerate(pods)}
        self._node_leaf = {n: leaf_index[topology.leaf_of(n)] for n in topology.nodes}
        self._leaf_pod = [pod_index[topology.minipod_of(topology.nodes_under(leaf)[0])]
                          for leaf in leaves]
        self._n_leaves, self._n_pods = len(leaves), len(pods)
        self._known: dict[_Key, tuple[Placement, dict[Cell, list[_Where]]]] = {}
        self.hits = 0
        self.misses = 0
        #: The longest solve, and how many solves the wall-clock safety net stopped (a
        #: replay's answer depends on the machine's load only through those).
        self.slowest_s = 0.0
        self.time_limited = 0

    def _canonical(self, pool: Sequence[str]) -> tuple[list[list[list[str]]],
                                                         tuple[tuple[int, ...], ...]]:
        by_leaf: list[list[str]] = [[] for _ in range(self._n_leaves)]
        for name in pool:
            by_leaf[self._node_leaf[name]].append(name)
        by_pod: list[list[list[str]]] = [[] for _ in range(self._n_pods)]
        for leaf, nodes in enumerate(by_leaf):
            if nodes:
                by_pod[self._leaf_pod[leaf]].append(nodes)
        for leaves in by_pod:
            leaves.sort(key=len, reverse=True)  # stable: ties keep tree order
        by_pod = [leaves for leaves in by_pod if leaves]
        by_pod.sort(key=lambda leaves: [len(nodes) for nodes in leaves], reverse=True)
        return by_pod, tuple(tuple(len(nodes) for nodes in leaves) for leaves in by_pod)

    def place(self, pool: Sequence[str], shape: JobShape) -> Placement:
        """Place ``shape`` on ``pool`` (node names in topology order), as ``place`` would."""
        by_pod, counts = self._canonical(pool)
        known = self._known.get((counts, shape))
        if known is not None:
            self.hits += 1
            placement, where = known
            cells = {cell: [by_pod[p][leaf][k] for p, leaf, k in spots]
                     for cell, spots in where.items()}
            return replace(placement, cells=cells, solve_seconds=0.0)
        self.misses += 1
        # The simulator reports minipod spreads only; it keeps the MIP's own arrangement
        # inside minipods (arranging for the tiers below costs time per placement and would
        # move which nodes later jobs find free, so its published runs would not replay).
        placement = place(self.topology, pool, shape, algo=self.algo, alpha=self.alpha,
                          time_limit=self.time_limit, lower_tiers=False)
        self.slowest_s = max(self.slowest_s, placement.solve_seconds)
        self.time_limited += placement.info.get("stopped") == "time limit"
        spot = {name: (p, leaf, k) for p, leaves in enumerate(by_pod)
                for leaf, nodes in enumerate(leaves) for k, name in enumerate(nodes)}
        self._known[(counts, shape)] = (placement, {
            cell: [spot[n] for n in nodes] for cell, nodes in placement.cells.items()})
        return placement
