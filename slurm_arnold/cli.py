"""The ``arnold`` command: a thin click layer over the library.

Exit codes, for every command: 0 success; 1 an error we report (bad input, infeasible request,
Slurm failure) as one line on stderr naming the problem and the fix; 2 a usage error.
"""

from __future__ import annotations

import json
import logging
import sys
from typing import Any

import click
import hostlist
from rich.console import Console
from rich.tree import Tree

from site_config import SiteConfig, load_config
from slurm_arnold.cluster import ClusterView, live_cluster, offline_cluster
from slurm_arnold.errors import ArnoldError
from slurm_arnold.slurm import Slurm
from slurm_arnold.topology import read_topology_file


class ArnoldGroup(click.Group):
    """A click group that turns library errors into one-line messages and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; report ``ArnoldError`` as ``arnold: error: ...`` and exit 1."""
        try:
            return super().invoke(ctx)
        except ArnoldError as exc:
            click.echo(f"arnold: error: {exc}", err=True)
            ctx.exit(1)


def setup_logging(verbose: int) -> None:
    """Logs go to stderr: WARNING by default, INFO with -v, DEBUG (every Slurm command) with -vv."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="arnold: %(levelname)s: %(name)s: %(message)s")


@click.group(cls=ArnoldGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-v", "--verbose", count=True, help="More logging on stderr (-vv: every command).")
@click.version_option(package_name="slurm-arnold")
def main(verbose: int) -> None:
    """Topology-aware placement and scheduling of LLM training jobs on Slurm."""
    setup_logging(verbose)


@main.group()
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
        })
    return {"switches": switches, "nodes": nodes}


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
        return f"[bold]{name}[/bold] ({_kind(view, name)}) {free}/{total} GPUs free"

    def add(parent: Tree, name: str) -> None:
        sw = topo.switches[name]
        branch = parent.add(label(name))
        if sw.is_leaf:
            groups: dict[str, list[str]] = {}
            for node in sw.children:
                info = view.nodes.get(node)
                state = "free" if node in view.free else info.state_text if info else "unknown"
                groups.setdefault(state, []).append(node)
            for state, members in groups.items():
                colour = "green" if state == "free" else "red"
                branch.add(f"{hostlist.collect_hostlist(members)} [{colour}]{state}[/{colour}]")
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
@click.option("--topology", "topology_file", type=click.Path(dir_okay=False),
              help="Read this topology.conf instead of the live cluster.")
@click.option("--gpus-per-node", type=click.IntRange(min=1), default=8, show_default=True,
              help="GPUs per node when reading a topology file.")
@click.option("--partition", help="Partition whose nodes count as free (default: Slurm's).")
@click.option("--minipod-level", type=click.IntRange(min=0),
              help="Switch level that forms a minipod (default: site config, 1).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def topology_show(topology_file: str | None, gpus_per_node: int, partition: str | None,
                  minipod_level: int | None, as_json: bool) -> None:
    """Print the switch tree with free/total GPUs per switch."""
    config = load_config({"minipod_level": minipod_level, "partition": partition})
    view = load_view(config, topology_file, gpus_per_node, partition)
    if as_json:
        click.echo(json.dumps(topology_json(view)))
        return
    Console(soft_wrap=True).print(render_tree(view))
