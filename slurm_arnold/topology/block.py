"""NVLink domains from Slurm's topology/block ``topology.conf`` (and its ``scontrol show
topology``), and the tree of blocks Slurm's block plugin sees above them.

A *domain* is a set of nodes joined by a scale-up fabric (NVLink: a GB200 NVL72 rack is 18
nodes of 4 GPUs); Slurm's topology/block names each one a block (``BlockName=b1
Nodes=n[01-18]``) and ``BlockSizes`` lists the base block size and the larger sizes it will
build by joining neighbouring blocks (each a power of two times the base). Three sources:

- **topology/block** ``topology.conf``: blocks only. The scale-out tiers are then Slurm's own
  view of them: level 1 joins ``BlockSizes[1] / BlockSizes[0]`` consecutive blocks, and so on
  (pairs at each level where ``BlockSizes`` stops); each block is its own leaf.
- **topology.yaml** (Slurm 25.05+): several named topologies. A tree topology gives the
  scale-out switches, a block topology the domains; with both, each node has a leaf switch
  and a domain. Which ones: the ``cluster_default`` tree, else the first, and the first block
  topology; ``name`` picks the topology of its own kind (a partition's block topology, say)
  and leaves the other kind at its default.
- **topology/tree** ``topology.conf``: no domains; every node is its own (TP inside the node).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from slurm_arnold.errors import TopologyError
from slurm_arnold.topology.lines import expand, logical_lines
from slurm_arnold.topology.model import Switch, Topology

#: Name given to the switch above every block when the blocks' own levels do not meet in one.
BLOCK_ROOT = "blocks"


@dataclass(frozen=True)
class Blocks:
    """NVLink domains in the order the source lists them, and Slurm's block sizes (nodes)."""

    members: dict[str, tuple[str, ...]]
    sizes: tuple[int, ...]

    def domain_map(self) -> dict[str, str]:
        """node -> block name."""
        return {node: name for name, nodes in self.members.items() for node in nodes}


def is_block_conf(text: str) -> bool:
    """Whether ``topology.conf`` text is topology/block's (it names a ``BlockName``)."""
    return any(line.lower().startswith(("blockname=", "blocksizes="))
               for _, line in logical_lines(text))


#: Keys ``scontrol show topology`` adds to each block line.
_LIVE_BLOCK_KEYS = ("blockindex", "blocksize", "aggregatedblock")


def parse_block_conf(text: str, source: str = "topology.conf", *, live: bool = False) -> Blocks:
    """Read topology/block's ``BlockName=... Nodes=...`` and ``BlockSizes=...`` lines (with
    ``live``, ``scontrol show topology``'s: each block's ``BlockSize`` and ``BlockIndex``,
    and an ``AggregatedBlock=`` line per larger size, whose ``BlockSize`` values are the
    configured ``BlockSizes``)."""
    members: dict[str, tuple[str, ...]] = {}
    sizes: tuple[int, ...] = ()
    shown_sizes: set[int] = set()
    for line, content in logical_lines(text):
        fields: dict[str, str] = {}
        extra: dict[str, str] = {}
        for token in content.split():
            key, eq, value = token.partition("=")
            if not eq or not key:
                raise TopologyError(source, line, f"expected Key=Value, got {token!r}")
            if live and key.lower() in _LIVE_BLOCK_KEYS:
                extra[key.lower()] = value
                continue
            if key.lower() not in ("blockname", "nodes", "blocksizes"):
                raise TopologyError(source, line, f"unknown key {key!r} in a topology/block "
                                    "file; expected BlockName, Nodes or BlockSizes")
            fields[key.lower()] = value
        if "blocksize" in extra:
            shown_sizes |= set(parse_sizes([extra["blocksize"]], source, line))
        if "aggregatedblock" in extra:
            continue
        if "blocksizes" in fields:
            if len(fields) > 1:
                raise TopologyError(source, line, "BlockSizes= goes on a line of its own")
            sizes = parse_sizes(fields["blocksizes"].split(","), source, line)
            continue
        name = fields.get("blockname")
        if not name:
            raise TopologyError(source, line, "statement without BlockName=")
        if "nodes" not in fields:
            raise TopologyError(source, line, f"block {name} has no Nodes=")
        if name in members:
            raise TopologyError(source, line, f"block {name} defined twice")
        members[name] = tuple(expand(fields["nodes"], source, line, "Nodes"))
    if shown_sizes and not sizes:
        sizes = parse_sizes(sorted(shown_sizes), source, None)
    return checked(Blocks(members, sizes), source)


def parse_sizes(values: Iterable[Any], source: str, line: int | None) -> tuple[int, ...]:
    """``BlockSizes`` as whole numbers, each a power of two times the one before."""
    try:
        sizes = tuple(int(str(v).strip()) for v in values)
    except ValueError:
        raise TopologyError(source, line, "BlockSizes must be whole numbers of nodes, "
                            "e.g. BlockSizes=18,36") from None
    if not sizes or min(sizes) < 1:
        raise TopologyError(source, line, "BlockSizes must be positive, e.g. BlockSizes=18,36")
    for low, high in pairwise(sizes):
        ratio = high // low
        if high % low or ratio < 2 or ratio & (ratio - 1):
            raise TopologyError(source, line, f"BlockSizes {low} then {high}: each size must "
                                "be a power of two (2, 4, ...) times the one before")
    return sizes


def checked(blocks: Blocks, source: str) -> Blocks:
    """``blocks`` validated (no node in two blocks, none below the base size), with Slurm's
    default base size where ``BlockSizes`` is not given."""
    if not blocks.members:
        raise TopologyError(source, None, "no blocks defined (BlockName=... Nodes=...)")
    seen: dict[str, str] = {}
    for name, nodes in blocks.members.items():
        for node in nodes:
            if node in seen:
                raise TopologyError(source, None, f"node {node} is in two blocks: "
                                    f"{seen[node]} and {name}")
            seen[node] = name
    if not blocks.sizes:
        # Slurm's default: the smallest block is the planning base.
        return Blocks(blocks.members, (min(len(n) for n in blocks.members.values()),))
    small = [n for n, nodes in blocks.members.items() if len(nodes) < blocks.sizes[0]]
    if small:
        raise TopologyError(source, None, f"block {small[0]} has fewer nodes than the base "
                            f"block size {blocks.sizes[0]} (BlockSizes)")
    return blocks


def block_tree(blocks: Blocks, source: str, *, minipod_level: int = 1) -> Topology:
    """The scale-out tree Slurm's block plugin sees: blocks at level 0, then consecutive
    blocks joined per ``BlockSizes`` (pairs above the last size) until one remains."""
    switches: dict[str, Switch] = {}
    level_names = list(blocks.members)
    for name, nodes in blocks.members.items():
        switches[name] = Switch(name, 0, None, nodes)
    ratios = [b // a for a, b in pairwise(blocks.sizes)]
    level = 0
    while len(level_names) > 1:
        level += 1
        ratio = ratios[level - 1] if level - 1 < len(ratios) else 2
        groups = [level_names[i:i + ratio] for i in range(0, len(level_names), ratio)]
        if len(groups) == 1:
            names = [BLOCK_ROOT]
        else:
            names = [f"{BLOCK_ROOT}-l{level}-{k}" for k in range(len(groups))]
        for name, group in zip(names, groups, strict=True):
            if name in switches:
                raise TopologyError(source, None, f"block name {name} is reserved; rename it")
            switches[name] = Switch(name, level, None, tuple(group))
            for child in group:
                switches[child] = _with_parent(switches[child], name)
        level_names = names
    node_leaf = {node: name for name, nodes in blocks.members.items() for node in nodes}
    return Topology(switches, node_leaf, minipod_level, source, domains=blocks.domain_map(),
                    block_sizes=blocks.sizes)


def _with_parent(sw: Switch, parent: str) -> Switch:
    return Switch(sw.name, sw.level, parent, sw.children)


def with_domains(tree: Topology, blocks: Blocks, source: str) -> Topology:
    """``tree`` with ``blocks`` as its NVLink domains (every block node must be in the tree)."""
    known = set(tree.nodes)
    for name, nodes in blocks.members.items():
        missing = [n for n in nodes if n not in known]
        if missing:
            raise TopologyError(source, None, f"block {name}: node {missing[0]} is not under "
                                "any switch of the tree")
    return Topology(tree.switches, tree.node_leaf, tree.minipod_level, source,
                    domains=blocks.domain_map(), block_sizes=blocks.sizes)
