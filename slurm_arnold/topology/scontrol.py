"""The live ``scontrol show topology``: a tree's switches, or a block topology's blocks, in
which case the scale-out tiers come from the cluster's default tree where that lists every
block node, else from Slurm's tree of blocks."""

from __future__ import annotations

from slurm_arnold.topology.block import block_tree, is_block_conf, parse_block_conf, with_domains
from slurm_arnold.topology.model import Topology
from slurm_arnold.topology.tree import parse_topology


def parse_scontrol_topology(text: str, source: str = "scontrol show topology", *,
                            fabric: str = "", minipod_level: int = 1) -> Topology:
    """The topology ``scontrol show topology [NAME]`` printed as ``text``. For a block
    topology, ``fabric`` is the cluster's default topology as the same command printed it
    (empty when there is none apart from ``text``)."""
    if not is_block_conf(text):
        return parse_topology(text, source, live=True, minipod_level=minipod_level)
    found = parse_block_conf(text, source, live=True)
    if fabric.strip() and not is_block_conf(fabric):
        tree = parse_topology(fabric, "scontrol show topology", live=True,
                              minipod_level=minipod_level)
        if set(found.domain_map()) <= set(tree.nodes):
            return with_domains(tree, found, source)
    return block_tree(found, source, minipod_level=minipod_level)
