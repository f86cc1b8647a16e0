"""``arnold topology``: the cluster's switch tree with free/total GPUs per switch."""

from __future__ import annotations

import json
from typing import Any

import click
import hostlist
from rich.console import Console
from rich.tree import Tree

from site_config import SiteConfig, load_config
from slurm_arnold.cli.options import (
    json_option,
    minipod_level_option,
    topology_option,
)
from slurm_arnold.slurm import Slurm
from slurm_arnold.snapshot.live import live_cluster
from slurm_arnold.snapshot.view import ClusterView, offline_cluster
from slurm_arnold.topology import read_topology_file, tiers


@click.group()
def topology() -> None:
    """Inspect the cluster's fat-tree topology."""


def topology_json(view: ClusterView) -> dict[str, Any]:
    """The ``arnold topology show --json`` object: every switch, every node expanded."""
    topo = view.topology
    switches = [
        {"name": s.name, "level": s.level, "kind": _kind(view, s.name), "parent": s.parent,
         "children": list(s.children)}
        for s in topo.switches.values()
    ]
    nodes = []
    for name in topo.nodes:
        info = view.nodes.get(name)
        nodes.append({
            "name": name,
            "leaf": topo.leaf_of(name),
            "minipod": topo.minipod_of(name),
            "state": info.state_text if info else "unknown",
            "gpus_total": info.gpus_total if info else 0,
            "gpus_free": info.gpus_free if info and name in view.free else 0,
            "free": name in view.free,
            "domain": topo.domain_of(name),
            "path": topo.path_of(name),
        })
    return {"switches": switches, "nodes": nodes, "tiers": tiers(topo),
            "block_sizes": list(topo.block_sizes), "domains": _domains_json(view)}


def _domains_json(view: ClusterView) -> list[dict[str, Any]]:
    """Each NVLink domain with its nodes and how many are free (whole: all of them)."""
    members: dict[str, list[str]] = {}
    for node, domain in view.topology.domains.items():
        members.setdefault(domain, []).append(node)
    return [{"name": name, "nodes": len(nodes),
             "free": sum(1 for n in nodes if n in view.free),
             "whole_free": all(n in view.free for n in nodes)}
            for name, nodes in members.items()]


def _kind(view: ClusterView, switch: str) -> str:
    topo = view.topology
    if switch == topo.root.name:
        return "core"
    if switch in set(topo.minipods()):
        return "minipod"
    return "leaf" if topo.switches[switch].is_leaf else "switch"


def render_tree(view: ClusterView) -> Tree:
    """A rich tree of switches with free/total GPUs, leaves with their nodes' states."""
    topo = view.topology

    def label(name: str) -> str:
        free, total = view.gpus_under(name)
        kind = "NVLink domain" if topo.domains and name in topo.domains.values() \
            else _kind(view, name)
        return f"[bold]{name}[/bold] ({kind}) {free}/{total} GPUs free"

    def add(parent: Tree, name: str) -> None:
        sw = topo.switches[name]
        branch = parent.add(label(name))
        if sw.is_leaf:
            groups: dict[tuple[str | None, str], list[str]] = {}
            for node in sw.children:
                info = view.nodes.get(node)
                state = "free" if node in view.free else info.state_text if info else "unknown"
                groups.setdefault((topo.domain_of(node), state), []).append(node)
            for (domain, state), members in groups.items():
                colour = "green" if state == "free" else "red"
                where = f" (NVLink domain {domain})" if domain and domain != name else ""
                branch.add(f"{hostlist.collect_hostlist(members)} [{colour}]{state}[/{colour}]"
                           f"{where}")
        else:
            for child in sw.children:
                add(branch, child)

    root = Tree(label(topo.root.name))
    for child in topo.root.children:
        add(root, child)
    return root


def load_view(config: SiteConfig, topology_file: str | None, gpus_per_node: int,
              partition: str | None) -> ClusterView:
    """The live cluster, or the offline one a topology file describes."""
    if topology_file:
        topo = read_topology_file(topology_file, minipod_level=config.minipod_level)
        return offline_cluster(topo, gpus_per_node)
    return live_cluster(Slurm(), minipod_level=config.minipod_level,
                        partition=partition or config.partition)


@topology.command("show")
@topology_option("Read this topology file instead of the live cluster: topology/tree's or "
                 "topology/block's topology.conf, or Slurm's topology.yaml (tree and blocks).")
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=8, show_default=True,
              help="GPUs per node when reading a topology file.")
@click.option("--partition", help="Partition whose nodes count as free (default: Slurm's).")
@minipod_level_option()
@json_option()
def topology_show(topology_file: str | None, gpus_per_node: int, partition: str | None,
                  minipod_level: int | None, as_json: bool) -> None:
    """Print the switch tree with free/total GPUs per switch."""
    config = load_config({"minipod_level": minipod_level, "partition": partition})
    view = load_view(config, topology_file, gpus_per_node, partition)
    if as_json:
        click.echo(json.dumps(topology_json(view)))
        return
    Console(soft_wrap=True).print(render_tree(view))



