"""The simulated cluster: free GPUs per node over a switch tree, and Slurm-like node choice.

Arrays indexed by node (tree order) keep every whole-cluster question a numpy call, which is
what lets a 450,000-job replay finish in minutes.

Where the topology has NVLink domains (topology/block's blocks, ``Topology.domains``), the
cluster counts the domains with every node free, and with ``keep_domains_whole`` its node
choice prefers partly used domains (best fit among them) to whole ones inside the leaves it
picks, as arnold's placement does, so that small jobs leave whole domains to large ones.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from slurm_arnold.topology import Topology


class SimCluster:
    """Nodes of ``g`` GPUs under ``topology``; jobs hold whole nodes or GPUs of one node."""

    def __init__(self, topology: Topology, gpus_per_node: int) -> None:
        self.topology = topology
        self.g = gpus_per_node
        self.names = topology.nodes
        self.n = len(self.names)
        self.index = {name: i for i, name in enumerate(self.names)}
        leaves = topology.leaves()
        leaf_index = {leaf: i for i, leaf in enumerate(leaves)}
        self.leaf = np.array([leaf_index[topology.leaf_of(n)] for n in self.names], dtype=np.int64)
        self.n_leaves = len(leaves)
        # Each leaf's nodes in tree order: a per-leaf question costs that leaf, not the tree.
        self.leaf_nodes = [np.flatnonzero(self.leaf == k) for k in range(self.n_leaves)]
        # Switch levels above the leaves: for each, the group index of every leaf.
        self.levels: list[np.ndarray] = []
        parents = list(leaves)
        while True:
            ups = [topology.switches[p].parent for p in parents]
            if any(u is None for u in ups):
                break
            names = list(dict.fromkeys(u for u in ups if u is not None))
            group = {u: i for i, u in enumerate(names)}
            mapping = np.array([group[u] for u in ups if u is not None], dtype=np.int64)
            if self.levels:
                mapping = mapping[self.levels[-1]]
            self.levels.append(mapping)
            parents = names
        self.free_gpus = np.full(self.n, gpus_per_node, dtype=np.int64)
        self.blocked = np.zeros(self.n, dtype=bool)  # held by a reservation
        # NVLink domains: index per node (-1: none) and nodes per domain.
        names_of = list(dict.fromkeys(topology.domains[n] for n in self.names
                                      if n in topology.domains))
        number = {d: i for i, d in enumerate(names_of)}
        self.domain = np.array([number.get(topology.domains.get(n, ""), -1) for n in self.names],
                               dtype=np.int64)
        self.n_domains = len(names_of)
        self.domain_size = np.bincount(self.domain[self.domain >= 0], minlength=self.n_domains)
        #: Prefer partly used domains to whole ones when choosing nodes.
        self.keep_domains_whole = False

    @property
    def total_gpus(self) -> int:
        """GPUs in the cluster."""
        return self.n * self.g

    def whole_free(self) -> np.ndarray:
        """Mask of nodes with every GPU free."""
        mask: np.ndarray = self.free_gpus == self.g
        return mask

    def _domain_free(self, nodes: np.ndarray) -> np.ndarray:
        """How many of ``nodes`` (a mask) each domain has."""
        counts: np.ndarray = np.bincount(self.domain[nodes & (self.domain >= 0)],
                                         minlength=self.n_domains)
        return counts

    def whole_domains(self) -> int:
        """Domains with every node free and outside reservations (0 without domains)."""
        if not self.n_domains:
            return 0
        free = self._domain_free(self.whole_free() & ~self.blocked)
        return int(np.count_nonzero(free == self.domain_size))

    def _domain_rank(self) -> np.ndarray | None:
        """Per node, how much choosing it costs the domains: nodes of partly used domains first
        (the domain with the fewest free nodes first, best fit), nodes of whole free domains
        last; ``None`` when there is nothing to prefer."""
        if not (self.keep_domains_whole and self.n_domains):
            return None
        free = self._domain_free(self.whole_free())
        whole = free == self.domain_size
        per_domain = np.where(whole, self.n + free, free)
        rank: np.ndarray = np.where(self.domain >= 0, per_domain[np.maximum(self.domain, 0)], 0)
        return rank

    def take(self, nodes: Iterable[int], gpus_each: int) -> None:
        """Allocate ``gpus_each`` GPUs on each node."""
        for i in nodes:
            if self.free_gpus[i] < gpus_each:
                raise AssertionError(f"node {self.names[i]} has {self.free_gpus[i]} GPUs free, "
                                     f"{gpus_each} asked")
            self.free_gpus[i] -= gpus_each

    def give(self, nodes: Iterable[int], gpus_each: int) -> None:
        """Release ``gpus_each`` GPUs on each node."""
        for i in nodes:
            self.free_gpus[i] += gpus_each
            if self.free_gpus[i] > self.g:
                raise AssertionError(f"node {self.names[i]} released twice")

    def tree_fit(self, mask: np.ndarray, need: int) -> list[int] | None:
        """Slurm's topology/tree choice of ``need`` nodes among ``mask``, or None.

        The lowest switch level where one switch has enough candidate nodes; among those the
        switch with the fewest (best fit); inside it, the leaf with the fewest that still fits
        alone, else the fullest leaves first; nodes in tree order within a leaf.
        """
        if int(mask.sum()) < need:
            return None
        counts = np.bincount(self.leaf[mask], minlength=self.n_leaves)
        allowed = np.ones(self.n_leaves, dtype=bool)
        fits = counts >= need
        if not fits.any():
            for mapping in self.levels:
                per = np.bincount(mapping, weights=counts).astype(np.int64)
                ok = per >= need
                if ok.any():
                    best = int(np.argmin(np.where(ok, per, np.iinfo(np.int64).max)))
                    allowed = mapping == best
                    break
        inside = np.where(allowed, counts, 0)
        single = inside >= need
        if single.any():
            leaf = int(np.argmin(np.where(single, inside, np.iinfo(np.int64).max)))
            return self._first(mask, [leaf], need)
        order = np.argsort(-inside, kind="stable")
        chosen, have = [], 0
        for leaf in order:
            if have >= need or inside[leaf] == 0:
                break
            chosen.append(int(leaf))
            have += int(inside[leaf])
        return self._first(mask, chosen, need)

    def _first(self, mask: np.ndarray, leaves: Sequence[int], need: int) -> list[int]:
        out: list[int] = []
        rank = self._domain_rank()
        for leaf in leaves:
            under = self.leaf_nodes[leaf]
            idx = under[mask[under]]
            if rank is not None:
                idx = idx[np.argsort(rank[idx], kind="stable")]
            out.extend(idx[: need - len(out)].tolist())
            if len(out) == need:
                break
        return out

    def best_fit_node(self, mask: np.ndarray, gpus: int) -> int | None:
        """For a job smaller than a node: the candidate node with the fewest free GPUs that
        still fit (Slurm's best fit), or None."""
        room = np.where(mask & (self.free_gpus >= gpus), self.free_gpus, self.g + 1)
        rank = self._domain_rank()
        if rank is not None:
            # Among equally full nodes, one of a partly used domain (fewest free first).
            fits = room <= self.g
            if not fits.any():
                return None
            key = np.where(fits, room * (2 * self.n + 1) + rank, np.iinfo(np.int64).max)
            return int(np.argmin(key))
        i = int(np.argmin(room))
        return None if room[i] > self.g else i
