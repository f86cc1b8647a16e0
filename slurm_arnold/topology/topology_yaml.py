"""Slurm's ``topology.yaml`` (25.05+): several named topologies. A tree topology gives the
scale-out switches, a block topology the NVLink domains; with both, each node has a leaf switch
and a domain. Which ones: the ``cluster_default`` tree, else the first, and the first block
topology; ``name`` picks the topology of its own kind (a partition's block topology, say) and
leaves the other kind at its default."""

from __future__ import annotations

from typing import Any

import yaml

from slurm_arnold.errors import TopologyError
from slurm_arnold.topology.block import Blocks, block_tree, checked, parse_sizes, with_domains
from slurm_arnold.topology.lines import expand
from slurm_arnold.topology.model import Topology
from slurm_arnold.topology.tree import parse_topology


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
        members[block] = tuple(expand(_names(item["nodes"]), source, None, "nodes"))
    raw_sizes = spec.get("block_sizes")
    if raw_sizes is not None and not isinstance(raw_sizes, list):
        raw_sizes = str(raw_sizes).split(",")
    sizes = parse_sizes(raw_sizes, source, None) if raw_sizes else ()
    return checked(Blocks(members, sizes), source)


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
