"""Free capacity of the cluster in placement units, minipod by minipod and group by group.

A *group* is where a TP group of several nodes must stay (``Topology.group_of``): the NVLink
domain where the topology has domains, else the leaf switch."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from slurm_arnold.placement.job import JobShape
from slurm_arnold.topology import Topology


@dataclass
class Pool:
    """Free nodes grouped as ``groups[minipod][group] -> nodes`` (tree order)."""

    topology: Topology
    groups: dict[str, dict[str, list[str]]]
    nodes_per_unit: int
    #: NVLink domains with every node free (empty on a topology without domains).
    whole: frozenset[str] = frozenset()

    @classmethod
    def build(cls, topology: Topology, free: Iterable[str], job: JobShape) -> Pool:
        """Group the free nodes of ``topology`` for ``job``'s unit size."""
        groups: dict[str, dict[str, list[str]]] = {}
        for node in topology.in_tree_order(free):
            pod = groups.setdefault(topology.minipod_of(node), {})
            pod.setdefault(topology.group_of(node), []).append(node)
        whole: set[str] = set()
        if topology.domains:
            sizes: dict[str, int] = {}
            for domain in topology.domains.values():
                sizes[domain] = sizes.get(domain, 0) + 1
            whole = {g for pod in groups.values() for g, nodes in pod.items()
                     if len(nodes) == sizes.get(g)}
        return cls(topology, groups, job.nodes_per_unit, frozenset(whole))

    def group_units(self, pod: str, group: str) -> int:
        """Units that fit in one group (a unit of m nodes never leaves its group)."""
        return len(self.groups[pod][group]) // self.nodes_per_unit

    def capacity(self, pod: str) -> int:
        """Units that fit in one minipod."""
        return sum(self.group_units(pod, group) for group in self.groups.get(pod, {}))

    def capacities(self) -> dict[str, int]:
        """Units per minipod, largest first (ties in tree order)."""
        caps = {pod: self.capacity(pod) for pod in self.groups}
        return dict(sorted(((p, c) for p, c in caps.items() if c > 0), key=lambda pc: -pc[1]))

    def total_units(self) -> int:
        """Units that fit in the whole free set."""
        return sum(self.capacities().values())

    def units_in(self, pod: str) -> list[list[str]]:
        """The minipod's units (m nodes of one group each), fullest groups first; where the
        topology has NVLink domains, partly used domains before whole ones, so a job breaks
        a whole domain only when the partly used ones of its minipod are full (the layout,
        and so the spreads, are the same either way: this only picks inside a minipod)."""
        m = self.nodes_per_unit
        out: list[list[str]] = []
        groups = self.groups[pod]
        for group in sorted(groups, key=lambda g: (g in self.whole, -len(groups[g]))):
            nodes = groups[group]
            out.extend(nodes[i * m:(i + 1) * m] for i in range(len(nodes) // m))
        return out
