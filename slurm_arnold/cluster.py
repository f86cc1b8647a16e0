"""A snapshot of the cluster for placement: the switch tree, each node's state, the free nodes.

**Free**, for placement, is defined here and only here: a node is free when it is in the
partition the job asks for (or the default one), its state is IDLE with no flag that makes it
unavailable (DRAIN, DOWN, NOT_RESPONDING, MAINTENANCE, ...), and it is not in an active
reservation that the user may not use. Nodes that Slurm knows but the topology does not are
never free: a placement cannot reason about them.
"""

from __future__ import annotations

import getpass
from collections.abc import Iterable
from dataclasses import dataclass

import hostlist

from slurm_arnold.blocks import block_tree, is_block_conf, parse_block_conf, with_domains
from slurm_arnold.errors import ArnoldError
from slurm_arnold.slurm import UNAVAILABLE_FLAGS, NodeInfo, Reservation, Slurm
from slurm_arnold.topology import Topology, parse_topology


@dataclass
class ClusterView:
    """The topology with every node's state and the set of free nodes."""

    topology: Topology
    nodes: dict[str, NodeInfo]
    free: set[str]
    partition: str | None

    def common_gpus(self, nodes: Iterable[str] | None = None) -> int:
        """The most common GPU count among ``nodes`` (default: the free ones)."""
        counts: dict[int, int] = {}
        for name in self.free if nodes is None else nodes:
            info = self.nodes.get(name)
            if info and info.gpus_total:
                counts[info.gpus_total] = counts.get(info.gpus_total, 0) + 1
        if not counts:
            raise ArnoldError("no free node reports GPUs (gres/gpu); give --gpus-per-node")
        return max(counts, key=lambda k: counts[k])

    def gpus_under(self, switch: str) -> tuple[int, int]:
        """(free, total) GPUs below ``switch``; free counts only free nodes."""
        free = total = 0
        for name in self.topology.nodes_under(switch):
            info = self.nodes.get(name)
            if info is None:
                continue
            total += info.gpus_total
            if name in self.free:
                free += info.gpus_free
        return free, total


def may_use(res: Reservation, user: str) -> bool:
    """Whether ``user`` may run jobs in reservation ``res`` (its Users list, or -user)."""
    if any(u.startswith("-") for u in res.users):
        return f"-{user}" not in res.users
    return user in res.users


def free_nodes(
    topology: Topology,
    nodes: Iterable[NodeInfo],
    reservations: Iterable[Reservation],
    *,
    partition: str | None,
    user: str,
) -> set[str]:
    """The free nodes (see the module docstring for the definition)."""
    blocked: set[str] = set()
    for res in reservations:
        if res.state.upper() == "ACTIVE" and not may_use(res, user):
            blocked.update(res.nodes)
    known = set(topology.nodes)
    return {
        n.name
        for n in nodes
        if n.name in known
        and n.state == "IDLE"
        and not n.flags & UNAVAILABLE_FLAGS
        and (partition is None or partition in n.partitions)
        and n.name not in blocked
    }


def live_cluster(
    slurm: Slurm,
    *,
    minipod_level: int = 1,
    partition: str | None = None,
    user: str | None = None,
) -> ClusterView:
    """Read the live topology, node states and reservations through the adapter.

    ``partition`` defaults to the cluster's default partition; ``user`` to the caller.
    Raises ``TopologyError`` when Slurm has no usable topology, ``SlurmError`` when a command
    fails.
    """
    part = partition or slurm.default_partition()
    topology = live_topology(slurm, part, minipod_level=minipod_level)
    infos = slurm.nodes()
    free = free_nodes(topology, infos, slurm.reservations(), partition=part,
                      user=user or getpass.getuser())
    return ClusterView(topology, {n.name: n for n in infos}, free, part)


def live_topology(slurm: Slurm, partition: str | None, *, minipod_level: int = 1) -> Topology:
    """The topology ``partition`` is scheduled on: the cluster's tree, or (Slurm 25.05+'s
    topology.yaml) the partition's own topology. A block topology gives the NVLink domains;
    its scale-out tiers are the cluster's default tree where that lists every block node,
    else Slurm's tree of blocks (``slurm_arnold.blocks``)."""
    name = slurm.partition_topology(partition) if partition else None
    source = "scontrol show topology" + (f" {name}" if name else "")
    text = slurm.topology_text(name)
    if not text.strip():
        raise ArnoldError(
            "Slurm reports no topology; set TopologyPlugin=topology/tree and write topology.conf"
        )
    if not is_block_conf(text):
        return parse_topology(text, source, live=True, minipod_level=minipod_level)
    found = parse_block_conf(text, source, live=True)
    fabric = slurm.topology_text() if name else ""
    if fabric.strip() and not is_block_conf(fabric):
        tree = parse_topology(fabric, "scontrol show topology", live=True,
                              minipod_level=minipod_level)
        if set(found.domain_map()) <= set(tree.nodes):
            return with_domains(tree, found, source)
    return block_tree(found, source, minipod_level=minipod_level)


def slurm_choice(slurm: Slurm, view: ClusterView, nodes: int,
                 segment: int | None = None) -> list[str]:
    """The nodes slurmctld would give an exclusive job of ``nodes`` nodes now; on a partition
    of NVLink domains in segments of ``segment`` nodes (``--segment``: without one, Slurm's
    block plugin refuses a job no larger than a block whenever no single block holds it)."""
    args = ["-N", str(nodes), "--exclusive"]
    if view.partition:
        args += ["-p", view.partition]
    if segment and view.topology.domains:
        args.append(f"--segment={segment}")
    return slurm.test_only(args)


def offline_cluster(topology: Topology, gpus_per_node: int,
                    free: Iterable[str] | None = None) -> ClusterView:
    """A cluster described by a topology file alone: every node (or ``free``) is free."""
    free_set = set(topology.nodes if free is None else free)
    unknown = free_set - set(topology.nodes)
    if unknown:
        raise ArnoldError(
            f"free node {sorted(unknown)[0]} is not in {topology.source}; fix the free list"
        )
    infos = {
        n: NodeInfo(n, "IDLE" if n in free_set else "ALLOCATED", frozenset(), (),
                    gpus_per_node, 0 if n in free_set else gpus_per_node)
        for n in topology.nodes
    }
    return ClusterView(topology, infos, free_set, None)


def read_free_file(path: str) -> list[str]:
    """Free nodes from a file: one node name or hostlist expression per line; blank lines and
    ``#`` comments allowed. Raises ``ArnoldError`` naming the file and line of a bad entry."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise ArnoldError(f"{path}: cannot read: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ArnoldError(f"{path}: not a text file") from None
    nodes: list[str] = []
    for number, raw in enumerate(lines, start=1):
        text = raw.split("#", 1)[0].strip()
        if not text:
            continue
        if any(ch.isspace() for ch in text):
            raise ArnoldError(f"{path}:{number}: one node or hostlist per line, got {text!r}")
        try:
            nodes.extend(hostlist.expand_hostlist(text))
        except hostlist.BadHostlist as exc:
            raise ArnoldError(f"{path}:{number}: bad hostlist {text!r} ({exc})") from None
    return list(dict.fromkeys(nodes))
