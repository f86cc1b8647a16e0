"""topology/tree's ``topology.conf`` (``SwitchName=... Switches=... Nodes=...``, hostlist
ranges, ``#`` comments, ``\\`` continuation) and the live ``scontrol show topology`` of a tree,
which prints the same keys plus ``Level``, ``LinkSpeed`` and, on upper switches, every node
below them (``live=True``)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from slurm_arnold.errors import TopologyError
from slurm_arnold.topology.lines import expand, logical_lines
from slurm_arnold.topology.model import Switch, Topology

_KNOWN_KEYS = {"switchname", "switches", "nodes", "linkspeed", "level"}


@dataclass
class _Statement:
    line: int
    name: str
    switches: list[str] | None
    nodes: list[str] | None


def _statements(text: str, source: str) -> list[_Statement]:
    out = []
    for line, content in logical_lines(text):
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
        switches = expand(fields["switches"], source, line, "Switches") \
            if "switches" in fields else None
        nodes = expand(fields["nodes"], source, line, "Nodes") if "nodes" in fields else None
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
