"""Free capacity of the cluster in placement units, minipod by minipod and leaf by leaf."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from slurm_arnold.placement.job import JobShape
from slurm_arnold.topology import Topology


@dataclass
class Pool:
    """Free nodes grouped as ``leaves[minipod][leaf] -> nodes`` (tree order)."""

    topology: Topology
    leaves: dict[str, dict[str, list[str]]]
    nodes_per_unit: int

    @classmethod
    def build(cls, topology: Topology, free: Iterable[str], job: JobShape) -> Pool:
        """Group the free nodes of ``topology`` for ``job``'s unit size."""
        free_set = set(free)
        leaves: dict[str, dict[str, list[str]]] = {}
        for node in topology.nodes:
            if node in free_set:
                pod = leaves.setdefault(topology.minipod_of(node), {})
                pod.setdefault(topology.leaf_of(node), []).append(node)
        return cls(topology, leaves, job.nodes_per_unit)

    def leaf_units(self, pod: str, leaf: str) -> int:
        """Units that fit in one leaf (a unit of m nodes never crosses a leaf)."""
        return len(self.leaves[pod][leaf]) // self.nodes_per_unit

    def capacity(self, pod: str) -> int:
        """Units that fit in one minipod."""
        return sum(self.leaf_units(pod, leaf) for leaf in self.leaves.get(pod, {}))

    def capacities(self) -> dict[str, int]:
        """Units per minipod, largest first (ties in tree order)."""
        caps = {pod: self.capacity(pod) for pod in self.leaves}
        return dict(sorted(((p, c) for p, c in caps.items() if c > 0), key=lambda pc: -pc[1]))

    def total_units(self) -> int:
        """Units that fit in the whole free set."""
        return sum(self.capacities().values())

    def units_in(self, pod: str) -> list[list[str]]:
        """The minipod's units (m nodes of one leaf each), fullest leaves first."""
        m = self.nodes_per_unit
        out: list[list[str]] = []
        for leaf in sorted(self.leaves[pod], key=lambda lf: -len(self.leaves[pod][lf])):
            nodes = self.leaves[pod][leaf]
            out.extend(nodes[i * m:(i + 1) * m] for i in range(len(nodes) // m))
        return out
