"""The cluster at one moment for placement: the switch tree, each node's state, the free nodes,
and which of them a job may use.

**Free**, for placement, is defined here and only here: a node is free when it is in the
partition the job asks for (or the default one), its state is IDLE with no flag that makes it
unavailable (DRAIN, DOWN, NOT_RESPONDING, MAINTENANCE, ...), and it is in no active reservation
but the one the job names (``--reservation``), which its user may use. As Slurm has it: the
nodes of an active reservation run only jobs that name it, whoever its users are, and a job
that names one runs only on its nodes (unless the reservation has the FLEX flag). Nodes that
Slurm knows but the topology does not are never free: a placement cannot reason about them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import hostlist

from slurm_arnold.errors import ArnoldError
from slurm_arnold.slurm import UNAVAILABLE_FLAGS, NodeInfo, Reservation
from slurm_arnold.topology import (
    Topology,
)


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
    reservation: str | None = None,
) -> set[str]:
    """The free nodes for a job of ``user`` naming ``reservation`` (or none); see the module
    docstring for the definition."""
    blocked, only = reserved_for_others(reservations, user, reservation)
    known = set(topology.nodes)
    return {
        n.name
        for n in nodes
        if n.name in known
        and n.state == "IDLE"
        and not n.flags & UNAVAILABLE_FLAGS
        and (partition is None or partition in n.partitions)
        and n.name not in blocked
        and (only is None or n.name in only)
    }


def reserved_for_others(reservations: Iterable[Reservation], user: str,
                        reservation: str | None) -> tuple[set[str], set[str] | None]:
    """Nodes a job of ``user`` naming ``reservation`` may not use because of reservations, and
    the only nodes it may use (``None``: no such limit), by Slurm's rule (module docstring)."""
    blocked: set[str] = set()
    only: set[str] | None = None
    for res in reservations:
        if res.state.upper() != "ACTIVE":
            continue
        if reservation and res.name == reservation and may_use(res, user):
            if "FLEX" not in {f.upper() for f in res.flags}:
                only = set(res.nodes)
            continue
        blocked.update(res.nodes)
    return blocked, only


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


def _matches_constraint(features: frozenset[str], expr: str) -> bool:
    """Slurm's simple constraints: ``a``, ``a&b``, ``a|b``; anything richer is refused."""
    if re.search(r"[\[\]()*!]", expr):
        raise ArnoldError(f"--constraint={expr}: arnold-sbatch understands only a, a&b and "
                          "a|b; use --placement=slurm for richer constraints")
    return any(all(f in features for f in term.split("&")) for term in expr.split("|"))


def narrow_free(view: ClusterView, sbatch: Mapping[str, str], claimed: set[str]) -> set[str]:
    """Free nodes the job may use: minus -x, within -w, matching -C, minus claimed ones."""
    free = set(view.free) - claimed
    if "exclude" in sbatch:
        free -= set(hostlist.expand_hostlist(sbatch["exclude"]))
    if "nodelist" in sbatch:
        free &= set(hostlist.expand_hostlist(sbatch["nodelist"]))
    if "constraint" in sbatch:
        free = {n for n in free if n in view.nodes
                and _matches_constraint(view.nodes[n].features, sbatch["constraint"])}
    return free


def hostlist_text(nodes: Iterable[str]) -> str:
    """Node names as one Slurm hostlist (``n[001-004]``), as messages and scontrol take them."""
    return str(hostlist.collect_hostlist(list(nodes)))
