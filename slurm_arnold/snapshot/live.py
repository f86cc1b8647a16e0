"""The cluster read live through the Slurm adapter: its topology (the partition's own, with
NVLink domains where Slurm has blocks), node states and reservations as one ``ClusterView``,
and Slurm's own choice of nodes for a job (``sbatch --test-only``)."""

from __future__ import annotations

import getpass
from collections.abc import Sequence

from slurm_arnold.errors import ArnoldError
from slurm_arnold.slurm import NodeInfo, Reservation, Slurm
from slurm_arnold.snapshot.view import ClusterView, free_nodes
from slurm_arnold.topology import Topology, is_block_conf, parse_scontrol_topology


def live_cluster(
    slurm: Slurm,
    *,
    minipod_level: int = 1,
    partition: str | None = None,
    user: str | None = None,
    topology: Topology | None = None,
    reservation: str | None = None,
    reservations: Sequence[Reservation] | None = None,
    nodes: Sequence[NodeInfo] | None = None,
) -> ClusterView:
    """Read the live topology, node states and reservations through the adapter.

    ``partition`` defaults to the cluster's default partition; ``user`` to the caller;
    ``topology``, the partition's as ``live_topology`` read it (configuration, which a caller
    may read before a lock that only the state needs); ``reservation``: the one the job
    names, whose nodes are then the only free ones (``view.free_nodes``); ``reservations``:
    Slurm's, when the caller has read them already; ``nodes`` likewise. Raises
    ``TopologyError`` when Slurm has no usable topology, ``SlurmError`` when a command fails.
    """
    part = partition or slurm.default_partition()
    topology = topology or live_topology(slurm, part, minipod_level=minipod_level)
    infos = slurm.nodes() if nodes is None else nodes
    free = free_nodes(topology, infos,
                      slurm.reservations() if reservations is None else reservations,
                      partition=part,
                      user=user or getpass.getuser(), reservation=reservation)
    return ClusterView(topology, {n.name: n for n in infos}, free, part)


def live_topology(slurm: Slurm, partition: str | None, *, minipod_level: int = 1) -> Topology:
    """The topology ``partition`` is scheduled on: the cluster's tree, or (Slurm 25.05+'s
    topology.yaml) the partition's own topology. A block topology gives the NVLink domains;
    its scale-out tiers are the cluster's default tree where that lists every block node,
    else Slurm's tree of blocks (``slurm_arnold.topology.scontrol``)."""
    name = slurm.partition_topology(partition) if partition else None
    source = "scontrol show topology" + (f" {name}" if name else "")
    text = slurm.topology_text(name)
    if not text.strip():
        raise ArnoldError(
            "Slurm reports no topology; set TopologyPlugin=topology/tree and write topology.conf"
        )
    fabric = slurm.topology_text() if name and is_block_conf(text) else ""
    return parse_scontrol_topology(text, source, fabric=fabric, minipod_level=minipod_level)


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
