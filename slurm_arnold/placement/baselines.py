"""The paper's baselines and the two simple alignments.

Each baseline picks nodes the way a scheduler that knows nothing of the job's communication
would, and the user gets today's rank order: the node list sorted as Slurm sorts it (by name),
Megatron's default rank order (TP fastest, then DP, then PP), so consecutive nodes form a DP
group. Only ``topo-aware`` orders ranks by switch, as Slurm's topology/tree plugin lists nodes
switch by switch.

- **best-fit**: the tightest fit. If one minipod can hold the job, the one with the fewest free
  nodes that can; otherwise leaves in ascending order of free nodes (the most fragmented first),
  taking their free nodes until the job is covered.
- **random-fit**: free nodes drawn uniformly at random (seeded).
- **gpu-packing**: fewest switches touched at the leaf level: leaves in descending order of free
  nodes (the emptiest first), ignoring which minipod they are in.
- **topo-aware**: Slurm's topology/tree idea: the lowest switch whose subtree has enough free
  nodes (the tightest such switch at that level); inside it, one leaf if one fits (the tightest),
  otherwise leaves in descending order of free nodes. Ranks follow that switch order.

The two alignments fill minipods most-free first with whole units (TP groups inside a leaf):
- **dp-aligned**: cells in row order, so each DP group (one stage of every replica) is filled
  consecutively;
- **pp-aligned**: cells in column order, so each pipeline is filled consecutively.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from itertools import pairwise

from slurm_arnold.errors import InfeasibleError
from slurm_arnold.placement.job import JobShape
from slurm_arnold.placement.plan import Cell, cells_from_rank_order
from slurm_arnold.placement.pool import Pool
from slurm_arnold.topology import Topology


def slurm_sort_key(name: str) -> tuple[object, ...]:
    """Sort node names as hostlists do: text parts alphabetically, numbers numerically."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _need(job: JobShape, free: Sequence[str]) -> int:
    if len(free) < job.nodes:
        raise InfeasibleError(
            f"the job needs {job.nodes} nodes but only {len(free)} are free; "
            "ask for fewer nodes or wait"
        )
    return job.nodes


def _leaves(topology: Topology, free: Sequence[str]) -> dict[str, list[str]]:
    free_set = set(free)
    out: dict[str, list[str]] = {}
    for node in topology.nodes:
        if node in free_set:
            out.setdefault(topology.leaf_of(node), []).append(node)
    return out


def _take(groups: Sequence[list[str]], need: int) -> list[str]:
    out: list[str] = []
    for nodes in groups:
        out.extend(nodes[: need - len(out)])
        if len(out) == need:
            break
    return out


def best_fit(topology: Topology, free: Sequence[str], job: JobShape,
             rng: random.Random) -> list[str]:
    """Tightest minipod that fits, else the most fragmented leaves first."""
    need = _need(job, free)
    pods: dict[str, list[str]] = {}
    for node in free:
        pods.setdefault(topology.minipod_of(node), []).append(node)
    fitting = [p for p in pods if len(pods[p]) >= need]
    leaves = _leaves(topology, free)
    if fitting:
        pod = min(fitting, key=lambda p: len(pods[p]))
        inside = [lf for lf in leaves if topology.minipod_of(leaves[lf][0]) == pod]
        chosen = _take(sorted((leaves[lf] for lf in inside), key=len), need)
    else:
        chosen = _take(sorted(leaves.values(), key=len), need)
    return sorted(chosen, key=slurm_sort_key)


def random_fit(topology: Topology, free: Sequence[str], job: JobShape,
               rng: random.Random) -> list[str]:
    """Uniformly random free nodes."""
    need = _need(job, free)
    return sorted(rng.sample(list(free), need), key=slurm_sort_key)


def gpu_packing(topology: Topology, free: Sequence[str], job: JobShape,
                rng: random.Random) -> list[str]:
    """The emptiest leaves first, whatever minipod they are in."""
    need = _need(job, free)
    leaves = _leaves(topology, free)
    return sorted(_take(sorted(leaves.values(), key=len, reverse=True), need),
                  key=slurm_sort_key)


def topo_aware(topology: Topology, free: Sequence[str], job: JobShape,
               rng: random.Random) -> list[str]:
    """Lowest switch with room, best fit at that level; switch-ordered ranks."""
    need = _need(job, free)
    free_set = set(free)
    by_level: dict[int, list[str]] = {}
    for sw in topology.switches.values():
        by_level.setdefault(sw.level, []).append(sw.name)
    for level in sorted(by_level):
        fits = []
        for name in by_level[level]:
            count = sum(1 for n in topology.nodes_under(name) if n in free_set)
            if count >= need:
                fits.append((count, name))
        if fits:
            _, switch = min(fits)
            break
    else:  # pragma: no cover - the root always fits when enough nodes are free
        raise InfeasibleError("no switch has enough free nodes")
    under = set(topology.nodes_under(switch))
    leaves = {lf: ns for lf, ns in _leaves(topology, free).items() if ns[0] in under}
    one = sorted((len(ns), lf) for lf, ns in leaves.items() if len(ns) >= need)
    if one:
        return leaves[one[0][1]][:need]
    return _take(sorted(leaves.values(), key=len, reverse=True), need)


BASELINES: dict[str, Callable[[Topology, Sequence[str], JobShape, random.Random], list[str]]] = {
    "best-fit": best_fit,
    "random-fit": random_fit,
    "gpu-packing": gpu_packing,
    "topo-aware": topo_aware,
}


def baseline_cells(algo: str, topology: Topology, free: Sequence[str], job: JobShape,
                   seed: int) -> dict[Cell, list[str]]:
    """The cells a baseline gives, with today's rank order."""
    nodes = BASELINES[algo](topology, free, job, random.Random(seed))
    return cells_from_rank_order(nodes, job)


def aligned_cells(pool: Pool, job: JobShape, *, by: str) -> dict[Cell, list[str]]:
    """Fill minipods most-free first; ``by="dp"`` row by row, ``by="pp"`` column by column."""
    if pool.total_units() < job.units:
        raise InfeasibleError(
            f"the job needs {job.units} units of {job.nodes_per_unit} node(s) "
            f"{pool.topology.group_kind()}, only {pool.total_units()} fit in the free nodes; "
            "ask for fewer nodes or wait"
        )
    units = [u for pod in pool.capacities() for u in pool.units_in(pod)]
    cols = job.columns
    if by == "dp":
        order = [(u // cols, u % cols) for u in range(job.units)]
    else:
        order = [(u % job.pp, u // job.pp) for u in range(job.units)]
    return {cell: units[i] for i, cell in enumerate(order)}


def block_rule(topology: Topology, free: Sequence[str], nodes: int,
               segment: int) -> list[str] | None:
    """Slurm's topology/block choice for a job of ``nodes`` nodes with ``--segment`` =
    ``segment``, as its documentation describes it: the lowest level of the tree of blocks
    (level 0 the blocks; level k joins consecutive blocks as ``BlockSizes`` says, pairs above
    the last size) with a group that holds the job in whole segments, the tightest such group
    (fewest usable nodes; the first on ties), and inside it the tightest blocks first, each
    block's free nodes in the topology's order. Returned in Slurm's node-name order; None
    when no group holds the job. ``arnold bench placement --nvl`` compares with it, and the
    26.05 lane's tests compare it with slurmctld's own answer (``sbatch --test-only``)."""
    free_set = set(free)
    blocks: dict[str, list[str]] = {}
    for node in topology.nodes:
        block = topology.domains.get(node)
        if block is not None:
            blocks.setdefault(block, [])
            if node in free_set:
                blocks[block].append(node)
    names = list(blocks)
    usable = {b: len(blocks[b]) // segment * segment for b in names}
    ratios = [b // a for a, b in pairwise(topology.block_sizes)]
    span, level = 1, 0
    while True:
        groups = [names[i:i + span] for i in range(0, len(names), span)]
        fits = [(sum(usable[b] for b in g), k) for k, g in enumerate(groups)
                if sum(usable[b] for b in g) >= nodes]
        if fits:
            chosen = groups[min(fits)[1]]
            break
        if span >= len(names):
            return None
        span *= ratios[level] if level < len(ratios) else 2
        level += 1
    out: list[str] = []
    for block in sorted(chosen, key=lambda b: (usable[b], names.index(b))):
        out.extend(blocks[block][:min(usable[block], nodes - len(out))])
        if len(out) == nodes:
            break
    return sorted(out, key=slurm_sort_key)
