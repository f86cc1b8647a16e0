"""The cluster's network as slurm-arnold sees it: one model (``model``: switches, leaves,
minipods, NVLink domains, tier names) and one parser per input format, as Slurm's own
``topology/{tree,block}`` plugins sit behind one interface:

- ``tree``: topology/tree's ``topology.conf``;
- ``block``: topology/block's ``topology.conf`` (NVLink domains) and the tree of blocks;
- ``topology_yaml``: Slurm 25.05+'s ``topology.yaml``;
- ``scontrol``: the live ``scontrol show topology`` of either kind;
- ``files``: a topology file, whichever form it is in.
"""

from slurm_arnold.topology.block import (
    BLOCK_ROOT,
    Blocks,
    block_tree,
    is_block_conf,
    parse_block_conf,
    with_domains,
)
from slurm_arnold.topology.files import read_topology_file
from slurm_arnold.topology.model import DOMAIN, Switch, Topology, spread_tiers, tiers
from slurm_arnold.topology.scontrol import parse_scontrol_topology
from slurm_arnold.topology.topology_yaml import parse_topology_yaml
from slurm_arnold.topology.tree import parse_topology

__all__ = ["BLOCK_ROOT", "DOMAIN", "Blocks", "Switch", "Topology", "block_tree",
           "is_block_conf", "parse_block_conf", "parse_scontrol_topology", "parse_topology",
           "parse_topology_yaml", "read_topology_file", "spread_tiers", "tiers", "with_domains"]
