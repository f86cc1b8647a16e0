"""The fat-tree model: core / minipod / leaf switches / nodes, NVLink domains, and the names
of its tiers. The parsers beside this module build it from each input format.

Levels follow Slurm: a leaf switch (one with ``Nodes=``) is level 0 and every other switch is one
above its highest child. Which level forms a *minipod* is a site setting (``minipod_level``,
default 1: the switches right above the leaves). A node's minipod is its ancestor at that level;
where the tree is shallower than that, the top switch is the node's minipod.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import hostlist


@dataclass(frozen=True)
class Switch:
    """One switch: its level (0 = leaf), parent and children (switches, or nodes for a leaf)."""

    name: str
    level: int
    parent: str | None
    children: tuple[str, ...]

    @property
    def is_leaf(self) -> bool:
        """Whether this switch connects nodes directly."""
        return self.level == 0


@dataclass
class Topology:
    """A validated switch tree with exactly one top switch.

    ``nodes`` is in tree order (leaf by leaf, in the order the source lists them).
    """

    switches: dict[str, Switch]
    node_leaf: dict[str, str]
    minipod_level: int = 1
    source: str = "<topology>"
    #: node -> NVLink domain (Slurm's block); empty: every node is its own domain.
    domains: dict[str, str] = field(default_factory=dict)
    #: Slurm's BlockSizes (nodes), when the domains came from topology/block.
    block_sizes: tuple[int, ...] = ()
    _minipod: dict[str, str] = field(default_factory=dict, repr=False)
    _leaf_paths: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False)
    _position: dict[str, int] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        pods = {leaf: self._find_minipod(leaf) for leaf in set(self.node_leaf.values())}
        self._minipod = {n: pods[leaf] for n, leaf in self.node_leaf.items()}
        self._position = {n: i for i, n in enumerate(self.node_leaf)}
        # Paths are asked for per node (per tier, per placement): computed once per leaf.
        self._leaf_paths = {}
        for leaf in pods:
            path = [leaf]
            while (parent := self.switches[path[-1]].parent) is not None:
                path.append(parent)
            self._leaf_paths[leaf] = tuple(path)

    @property
    def nodes(self) -> list[str]:
        """Every node, in tree order."""
        return list(self.node_leaf)

    def in_tree_order(self, nodes: Iterable[str]) -> list[str]:
        """The distinct ``nodes`` that are in the tree, in tree order. Costs the nodes
        given, not the tree: the simulator asks for it at every placement on big trees."""
        position = self._position
        return sorted({n for n in nodes if n in position}, key=position.__getitem__)

    @property
    def root(self) -> Switch:
        """The top switch (the core)."""
        return next(s for s in self.switches.values() if s.parent is None)

    def leaf_of(self, node: str) -> str:
        """The leaf switch of ``node``."""
        return self.node_leaf[node]

    def minipod_of(self, node: str) -> str:
        """The minipod switch of ``node``."""
        return self._minipod[node]

    def domain_of(self, node: str) -> str | None:
        """The NVLink domain (block) of ``node``, None where it has none but itself."""
        return self.domains.get(node)

    def group_of(self, node: str) -> str:
        """Where a TP group spanning several nodes must stay: the node's NVLink domain where
        the topology has domains, else its leaf switch."""
        return self.domains.get(node) or self.node_leaf[node]

    def group_kind(self) -> str:
        """Where ``group_of`` keeps a TP group, in words for messages."""
        return "in one NVLink domain" if self.domains else "under one leaf switch"

    def path_of(self, node: str) -> list[str]:
        """The switches above ``node``, its leaf first and the top switch last."""
        return list(self._leaf_paths[self.node_leaf[node]])

    def depth(self) -> int:
        """The longest ``path_of`` (switch tiers from a leaf to the top)."""
        return max((len(p) for p in self._leaf_paths.values()), default=0)

    def minipods(self) -> list[str]:
        """Minipod switch names in tree order."""
        return list(dict.fromkeys(self._minipod.values()))

    def leaves(self) -> list[str]:
        """Leaf switch names in tree order."""
        return list(dict.fromkeys(self.node_leaf.values()))

    def conf_text(self) -> str:
        """The tree as ``topology.conf`` (one SwitchName line per switch, names compressed into
        hostlist ranges); ``parse_topology`` reads it back to the same tree."""
        lines = []
        for name, sw in self.switches.items():
            kind = "Nodes" if sw.is_leaf else "Switches"
            lines.append(f"SwitchName={name} {kind}={hostlist.collect_hostlist(list(sw.children))}")
        return "\n".join(lines) + "\n"

    def nodes_under(self, switch: str) -> list[str]:
        """Every node below ``switch``, in tree order."""
        sw = self.switches[switch]
        if sw.is_leaf:
            return list(sw.children)
        out: list[str] = []
        for child in sw.children:
            out.extend(self.nodes_under(child))
        return out

    def _find_minipod(self, leaf: str) -> str:
        sw = self.switches[leaf]
        while sw.level < self.minipod_level and sw.parent is not None:
            sw = self.switches[sw.parent]
        return sw.name


#: The name of the NVLink-domain tier.
DOMAIN = "nvlink domain"


def spread_tiers(topology: Topology) -> list[str]:
    """The tiers spreads are counted at, nearest first: the NVLink domain where the topology
    has domains that are not its leaves, then ``tiers``."""
    names = tiers(topology)
    return [DOMAIN, *names] if topology.domains and names[0] != DOMAIN else names


def tiers(topology: Topology) -> list[str]:
    """Names of the positions of ``Topology.path_of``: nearest tier first, the top last (the
    leaf is the NVLink domain itself when the tree was built from blocks)."""
    depth = topology.depth()
    names = ["leaf", *[f"level {k}" for k in range(1, depth)]]
    if 0 < topology.minipod_level < depth:
        names[topology.minipod_level] = "minipod"
    if depth > 1:
        names[-1] = "core"
    if topology.domains and all(topology.node_leaf[n] == d
                                for n, d in topology.domains.items()):
        names[0] = DOMAIN
    return names
