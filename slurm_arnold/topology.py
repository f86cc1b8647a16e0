"""The fat-tree model: core / minipod / leaf switches / nodes, and its two parsers.

Sources: a ``topology.conf`` file (``SwitchName=... Switches=... Nodes=...``, hostlist ranges,
``#`` comments, ``\\`` continuation) and the live ``scontrol show topology``, which prints the
same keys plus ``Level``, ``LinkSpeed`` and, on upper switches, every node below them.

Levels follow Slurm: a leaf switch (one with ``Nodes=``) is level 0 and every other switch is one
above its highest child. Which level forms a *minipod* is a site setting (``minipod_level``,
default 1: the switches right above the leaves). A node's minipod is its ancestor at that level;
where the tree is shallower than that, the top switch is the node's minipod.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import hostlist

from slurm_arnold.errors import TopologyError

_KNOWN_KEYS = {"switchname", "switches", "nodes", "linkspeed", "level"}


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

    def __post_init__(self) -> None:
        pods = {leaf: self._find_minipod(leaf) for leaf in set(self.node_leaf.values())}
        self._minipod = {n: pods[leaf] for n, leaf in self.node_leaf.items()}
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


@dataclass
class _Statement:
    line: int
    name: str
    switches: list[str] | None
    nodes: list[str] | None


def _logical_lines(text: str) -> Iterable[tuple[int, str]]:
    """Lines with comments removed and ``\\`` continuations joined, with starting line numbers."""
    pending = ""
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].rstrip()
        if not pending:
            start = number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        pending += line
        if pending.strip():
            yield start, pending.strip()
        pending = ""
    if pending.strip():
        yield start, pending.strip()


def _expand(expr: str, source: str, line: int | None, key: str) -> list[str]:
    try:
        names: list[str] = hostlist.expand_hostlist(expr)
    except hostlist.BadHostlist as exc:
        raise TopologyError(
            source, line, f"{key}={expr}: bad hostlist expression ({exc})"
        ) from None
    if not names:
        raise TopologyError(source, line, f"{key}= is empty")
    return names


def _statements(text: str, source: str) -> list[_Statement]:
    out = []
    for line, content in _logical_lines(text):
        fields: dict[str, str] = {}
        for token in content.split():
            key, eq, value = token.partition("=")
            if not eq or not key:
                raise TopologyError(source, line, f"expected Key=Value, got {token!r}")
            lkey = key.lower()
            if lkey not in _KNOWN_KEYS:
                raise TopologyError(
                    source, line,
                    f"unknown key {key!r}; expected SwitchName, Switches, Nodes or LinkSpeed",
                )
            if lkey in fields:
                raise TopologyError(source, line, f"{key} given twice")
            fields[lkey] = value
        if "switchname" not in fields:
            raise TopologyError(source, line, "statement without SwitchName=")
        name = fields["switchname"]
        if not re.fullmatch(r"[A-Za-z0-9_.\-]+", name):
            raise TopologyError(source, line, f"bad switch name {name!r}")
        switches = _expand(fields["switches"], source, line, "Switches") \
            if "switches" in fields else None
        nodes = _expand(fields["nodes"], source, line, "Nodes") if "nodes" in fields else None
        out.append(_Statement(line, name, switches, nodes))
    return out


def parse_topology(
    text: str,
    source: str = "topology.conf",
    *,
    known_nodes: Iterable[str] | None = None,
    minipod_level: int = 1,
    live: bool = False,
) -> Topology:
    """Parse ``topology.conf`` text (or, with ``live=True``, ``scontrol show topology`` output).

    ``known_nodes``, when given, is the cluster's node list: a node outside it is an error.
    Raises ``TopologyError`` with the source and line of the first problem: empty input,
    malformed or unknown keys, bad hostlists, duplicate switches, unknown child switches,
    a node under two leaves, a switch under two parents, cycles, more than one top switch.
    """
    statements = _statements(text, source)
    if not statements:
        raise TopologyError(source, None, "no switches defined (empty topology)")
    by_name: dict[str, _Statement] = {}
    for st in statements:
        if st.name in by_name:
            raise TopologyError(
                source, st.line,
                f"switch {st.name} defined twice (first at line {by_name[st.name].line})",
            )
        if st.switches is None and st.nodes is None:
            raise TopologyError(
                source, st.line, f"switch {st.name} has neither Nodes= nor Switches="
            )
        if st.switches is not None and st.nodes is not None and not live:
            raise TopologyError(
                source, st.line, f"switch {st.name} has both Nodes= and Switches=; use one"
            )
        by_name[st.name] = st

    known = set(known_nodes) if known_nodes is not None else None
    parent: dict[str, str] = {}
    node_leaf: dict[str, str] = {}
    for st in statements:
        if st.switches is not None:
            for child in st.switches:
                if child not in by_name:
                    raise TopologyError(
                        source, st.line, f"switch {st.name}: unknown switch {child}"
                    )
                if child == st.name:
                    raise TopologyError(source, st.line, f"switch {st.name} lists itself")
                if child in parent:
                    raise TopologyError(
                        source, st.line,
                        f"switch {child} is under both {parent[child]} and {st.name}",
                    )
                parent[child] = st.name
        else:
            assert st.nodes is not None
            for node in st.nodes:
                if known is not None and node not in known:
                    raise TopologyError(
                        source, st.line,
                        f"switch {st.name}: unknown node {node} (not in slurm.conf)",
                    )
                if node in node_leaf:
                    raise TopologyError(
                        source, st.line,
                        f"node {node} is under two leaf switches: {node_leaf[node]} and {st.name}",
                    )
                node_leaf[node] = st.name

    levels = _levels(statements, by_name, source)
    roots = [st for st in statements if st.name not in parent]
    if not roots:
        raise TopologyError(source, statements[0].line, "every switch has a parent (cycle)")
    if len(roots) > 1:
        top = max(roots, key=lambda st: levels[st.name])
        orphan = next(st for st in roots if st is not top)
        raise TopologyError(
            source, orphan.line,
            f"switch {orphan.name} has no parent (not connected to {top.name}); "
            "add it to a Switches= list",
        )
    switches = {
        st.name: Switch(
            st.name, levels[st.name], parent.get(st.name),
            tuple(st.switches if st.switches is not None else st.nodes or ()),
        )
        for st in statements
    }
    # Tree order: walk from the top so leaves appear in the order their parents list them.
    ordered: dict[str, str] = {}

    def walk(name: str) -> None:
        sw = switches[name]
        if sw.is_leaf:
            for node in sw.children:
                ordered[node] = name
        else:
            for child in sw.children:
                walk(child)

    walk(roots[0].name)
    return Topology(switches, ordered, minipod_level, source)


def _levels(
    statements: list[_Statement], by_name: dict[str, _Statement], source: str
) -> dict[str, int]:
    """Level of every switch (leaf 0); raises on a cycle."""
    levels: dict[str, int] = {}
    visiting: set[str] = set()

    def level(name: str) -> int:
        if name in levels:
            return levels[name]
        st = by_name[name]
        if name in visiting:
            raise TopologyError(source, st.line, f"switch {name} is part of a cycle")
        visiting.add(name)
        value = 0 if st.switches is None else 1 + max(level(c) for c in st.switches)
        visiting.discard(name)
        levels[name] = value
        return value

    for st in statements:
        level(st.name)
    return levels


def read_topology_file(
    path: str, *, known_nodes: Iterable[str] | None = None, minipod_level: int = 1
) -> Topology:
    """Read and parse a topology file: topology/tree's ``topology.conf`` (see
    ``parse_topology``), topology/block's, or Slurm's ``topology.yaml`` (by its ``.yaml`` or
    ``.yml`` name); see ``slurm_arnold.blocks`` for the last two."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise TopologyError(path, None, f"cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise TopologyError(path, None, "not a text file") from None
    from slurm_arnold import blocks  # it builds on this module

    if path.endswith((".yaml", ".yml")):
        topo = blocks.parse_topology_yaml(text, path, minipod_level=minipod_level)
    elif blocks.is_block_conf(text):
        topo = blocks.block_tree(blocks.parse_block_conf(text, path), path,
                                 minipod_level=minipod_level)
    else:
        return parse_topology(text, path, known_nodes=known_nodes, minipod_level=minipod_level)
    if known_nodes is not None:
        unknown = sorted(set(topo.nodes) - set(known_nodes))
        if unknown:
            raise TopologyError(path, None, f"unknown node {unknown[0]} (not in slurm.conf)")
    return topo
