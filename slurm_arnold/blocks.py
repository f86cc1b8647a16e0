"""NVLink domains: Slurm's topology/block, ``topology.yaml``, and their tree of blocks.

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

import yaml

from slurm_arnold.errors import TopologyError
from slurm_arnold.topology import Switch, Topology, _expand, _logical_lines, parse_topology

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
               for _, line in _logical_lines(text))


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
    for line, content in _logical_lines(text):
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
            shown_sizes |= set(_sizes([extra["blocksize"]], source, line))
        if "aggregatedblock" in extra:
            continue
        if "blocksizes" in fields:
            if len(fields) > 1:
                raise TopologyError(source, line, "BlockSizes= goes on a line of its own")
            sizes = _sizes(fields["blocksizes"].split(","), source, line)
            continue
        name = fields.get("blockname")
        if not name:
            raise TopologyError(source, line, "statement without BlockName=")
        if "nodes" not in fields:
            raise TopologyError(source, line, f"block {name} has no Nodes=")
        if name in members:
            raise TopologyError(source, line, f"block {name} defined twice")
        members[name] = tuple(_expand(fields["nodes"], source, line, "Nodes"))
    if shown_sizes and not sizes:
        sizes = _sizes(sorted(shown_sizes), source, None)
    return _checked(Blocks(members, sizes), source)


def _sizes(values: Iterable[Any], source: str, line: int | None) -> tuple[int, ...]:
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


def _checked(blocks: Blocks, source: str) -> Blocks:
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


def parse_topology_yaml(text: str, source: str = "topology.yaml", *, name: str | None = None,
                        minipod_level: int = 1) -> Topology:
    """Read Slurm's ``topology.yaml``: its tree (scale-out) and block (domains) topologies."""
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        raise TopologyError(source, mark.line + 1 if mark else None,
                            f"not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(doc, list) or not all(isinstance(t, dict) for t in doc):
        raise TopologyError(source, None, "expected a list of topologies "
                            "(- topology: NAME, then tree:, block: or flat:)")
    trees = [t for t in doc if isinstance(t.get("tree"), dict)]
    block_docs = [t for t in doc if isinstance(t.get("block"), dict)]
    if name is not None:
        chosen = [t for t in doc if t.get("topology") == name]
        if not chosen:
            known = ", ".join(str(t.get("topology")) for t in doc)
            raise TopologyError(source, None, f"no topology named {name!r} (have {known})")
        trees = [t for t in trees if t in chosen] or trees
        block_docs = [t for t in block_docs if t in chosen] or block_docs
    if not trees and not block_docs:
        raise TopologyError(source, None, "no tree or block topology in it (flat, ring and "
                            "torus3d topologies say nothing about switches or NVLink domains)")
    tree_doc = next((t for t in trees if t.get("cluster_default") is True),
                    trees[0] if trees else None)
    blocks = _yaml_blocks(block_docs[0], source) if block_docs else None
    if tree_doc is None:
        assert blocks is not None
        return block_tree(blocks, source, minipod_level=minipod_level)
    tree = parse_topology(_tree_conf(tree_doc, source), source, minipod_level=minipod_level)
    return tree if blocks is None else with_domains(tree, blocks, source)


def _yaml_blocks(doc: dict[str, Any], source: str) -> Blocks:
    where = f"topology {doc.get('topology')!r}"
    spec = doc["block"]
    items = spec.get("blocks")
    if not isinstance(items, list) or not items:
        raise TopologyError(source, None, f"{where}: block: needs a list of blocks")
    members: dict[str, tuple[str, ...]] = {}
    for item in items:
        if not isinstance(item, dict) or not item.get("block") or not item.get("nodes"):
            raise TopologyError(source, None, f"{where}: each block needs block: and nodes:")
        block = str(item["block"])
        if block in members:
            raise TopologyError(source, None, f"{where}: block {block} defined twice")
        members[block] = tuple(_expand(_names(item["nodes"]), source, None, "nodes"))
    raw_sizes = spec.get("block_sizes")
    if raw_sizes is not None and not isinstance(raw_sizes, list):
        raw_sizes = str(raw_sizes).split(",")
    sizes = _sizes(raw_sizes, source, None) if raw_sizes else ()
    return _checked(Blocks(members, sizes), source)


def _names(value: Any) -> str:
    """A hostlist from YAML: ``node[01-04]`` or a list of names."""
    return ",".join(str(v) for v in value) if isinstance(value, list) else str(value)


def _tree_conf(doc: dict[str, Any], source: str) -> str:
    """The tree topology as ``topology.conf`` lines, so one parser checks both forms."""
    items = doc["tree"].get("switches")
    if not isinstance(items, list) or not items:
        raise TopologyError(source, None, f"topology {doc.get('topology')!r}: tree: needs a "
                            "list of switches")
    lines = []
    for item in items:
        if not isinstance(item, dict) or not item.get("switch"):
            raise TopologyError(source, None, "each switch needs switch: NAME")
        parts = [f"SwitchName={item['switch']}"]
        if item.get("children"):
            parts.append(f"Switches={_names(item['children'])}")
        if item.get("nodes"):
            parts.append(f"Nodes={_names(item['nodes'])}")
        lines.append(" ".join(parts))
    return "\n".join(lines) + "\n"


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
