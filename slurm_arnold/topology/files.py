"""A topology file, whichever of Slurm's forms it is in."""

from __future__ import annotations

from collections.abc import Iterable

from slurm_arnold.errors import TopologyError
from slurm_arnold.topology.block import block_tree, is_block_conf, parse_block_conf
from slurm_arnold.topology.model import Topology
from slurm_arnold.topology.topology_yaml import parse_topology_yaml
from slurm_arnold.topology.tree import parse_topology


def read_topology_file(
    path: str, *, known_nodes: Iterable[str] | None = None, minipod_level: int = 1
) -> Topology:
    """Read and parse a topology file: topology/tree's ``topology.conf`` (see
    ``parse_topology``), topology/block's, or Slurm's ``topology.yaml`` (by its ``.yaml`` or
    ``.yml`` name); see the modules ``block`` and
    ``topology_yaml`` for the last two."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise TopologyError(path, None, f"cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise TopologyError(path, None, "not a text file") from None
    if path.endswith((".yaml", ".yml")):
        topo = parse_topology_yaml(text, path, minipod_level=minipod_level)
    elif is_block_conf(text):
        topo = block_tree(parse_block_conf(text, path), path,
                                 minipod_level=minipod_level)
    else:
        return parse_topology(text, path, known_nodes=known_nodes, minipod_level=minipod_level)
    if known_nodes is not None:
        unknown = sorted(set(topo.nodes) - set(known_nodes))
        if unknown:
            raise TopologyError(path, None, f"unknown node {unknown[0]} (not in slurm.conf)")
    return topo
