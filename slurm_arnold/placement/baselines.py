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

import functools
import random
import re
from bisect import insort
from collections.abc import Callable, Sequence
from itertools import pairwise

from slurm_arnold.errors import InfeasibleError
from slurm_arnold.placement.job import JobShape
from slurm_arnold.placement.plan import Cell, cells_from_rank_order
from slurm_arnold.placement.pool import Pool
from slurm_arnold.topology import Topology


@functools.lru_cache(maxsize=1 << 16)
def slurm_sort_key(name: str) -> tuple[object, ...]:
    """Sort node names as hostlists do: text parts alphabetically, numbers numerically."""
    # Cached: the simulator sorts the same few thousand names at every placement.
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _need(job: JobShape, free: Sequence[str]) -> int:
    if len(free) < job.nodes:
        raise InfeasibleError(
            f"the job needs {job.nodes} nodes but only {len(free)} are free; "
            "ask for fewer nodes or wait"
        )
    return job.nodes


def free_by_leaf(topology: Topology, free: Sequence[str]) -> dict[str, list[str]]:
    """The free nodes leaf by leaf, both in tree order (what the baselines start from; a
    caller running several on one free set makes it once and passes it as ``leaves``)."""
    out: dict[str, list[str]] = {}
    for node in topology.in_tree_order(free):
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
             rng: random.Random, leaves: dict[str, list[str]] | None = None) -> list[str]:
    """Tightest minipod that fits, else the most fragmented leaves first."""
    need = _need(job, free)
    pods: dict[str, list[str]] = {}
    for node in free:
        pods.setdefault(topology.minipod_of(node), []).append(node)
    fitting = [p for p in pods if len(pods[p]) >= need]
    leaves = free_by_leaf(topology, free) if leaves is None else leaves
    if fitting:
        pod = min(fitting, key=lambda p: len(pods[p]))
        inside = [lf for lf in leaves if topology.minipod_of(leaves[lf][0]) == pod]
        chosen = _take(sorted((leaves[lf] for lf in inside), key=len), need)
    else:
        chosen = _take(sorted(leaves.values(), key=len), need)
    return sorted(chosen, key=slurm_sort_key)


def random_fit(topology: Topology, free: Sequence[str], job: JobShape,
               rng: random.Random, leaves: dict[str, list[str]] | None = None) -> list[str]:
    """Uniformly random free nodes."""
    need = _need(job, free)
    return sorted(rng.sample(list(free), need), key=slurm_sort_key)


def gpu_packing(topology: Topology, free: Sequence[str], job: JobShape,
                rng: random.Random, leaves: dict[str, list[str]] | None = None) -> list[str]:
    """The emptiest leaves first, whatever minipod they are in."""
    need = _need(job, free)
    leaves = free_by_leaf(topology, free) if leaves is None else leaves
    return sorted(_take(sorted(leaves.values(), key=len, reverse=True), need),
                  key=slurm_sort_key)


def topo_aware(topology: Topology, free: Sequence[str], job: JobShape,
               rng: random.Random, leaves: dict[str, list[str]] | None = None) -> list[str]:
    """Lowest switch with room, best fit at that level; switch-ordered ranks."""
    need = _need(job, free)
    by_leaf = free_by_leaf(topology, free) if leaves is None else leaves
    # Free nodes under each switch, counted up each leaf's path (not down each switch).
    free_under: dict[str, int] = {}
    for nodes in by_leaf.values():
        for above in topology.path_of(nodes[0]):
            free_under[above] = free_under.get(above, 0) + len(nodes)
    by_level: dict[int, list[str]] = {}
    for sw in topology.switches.values():
        by_level.setdefault(sw.level, []).append(sw.name)
    for level in sorted(by_level):
        fits = [(free_under.get(name, 0), name) for name in by_level[level]
                if free_under.get(name, 0) >= need]
        if fits:
            _, switch = min(fits)
            break
    else:  # pragma: no cover - the root always fits when enough nodes are free
        raise InfeasibleError("no switch has enough free nodes")
    leaves = {lf: ns for lf, ns in by_leaf.items() if switch in topology.path_of(ns[0])}
    one = sorted((len(ns), lf) for lf, ns in leaves.items() if len(ns) >= need)
    if one:
        return leaves[one[0][1]][:need]
    return _take(sorted(leaves.values(), key=len, reverse=True), need)


BASELINES: dict[str, Callable[[Topology, Sequence[str], JobShape, random.Random,
                                dict[str, list[str]] | None], list[str]]] = {
    "best-fit": best_fit,
    "random-fit": random_fit,
    "gpu-packing": gpu_packing,
    "topo-aware": topo_aware,
}


def baseline_cells(algo: str, topology: Topology, free: Sequence[str], job: JobShape,
                   seed: int, leaves: dict[str, list[str]] | None = None
                   ) -> dict[Cell, list[str]]:
    """The cells a baseline gives, with today's rank order (``leaves``: ``free_by_leaf`` of
    ``free``, when the caller has it)."""
    nodes = BASELINES[algo](topology, free, job, random.Random(seed), leaves)
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
               segment: int | None = None, *,
               release: tuple[int, int] = (26, 5)) -> list[str] | None:
    """Slurm's topology/block choice for a job of ``nodes`` nodes (``--segment`` = ``segment``)
    as slurmctld makes it (eval_nodes_block, read in Slurm's source and checked against 26.05's
    answers by the 26.05 lane's tests): the segments (the whole job without one) are placed
    one after the other, each on its own. A segment takes the lowest block level whose blocks
    hold its size (base blocks; then as ``BlockSizes`` joins them, pairs above the last size),
    the block there with the fewest free nodes that still has enough (the last on ties), and
    inside it base blocks one at a time: the one with the fewest free nodes that holds what is
    left (the last on ties), else the one with the most; each block's free nodes in order. On
    Slurm 26.05 (``release``) a one-node job takes the first free node; 25.11 places it by the
    same rule as any other (both checked live, on their lanes). Returned in Slurm's node-name
    order; None when Slurm would refuse (a segment larger than a base block, a size that is not
    whole segments) or nothing holds a segment now. ``arnold bench placement --nvl`` compares
    with it."""
    free_set = set(free)
    blocks: dict[str, list[str]] = {}
    for node in topology.nodes:
        block = topology.domains.get(node)
        if block is not None:
            blocks.setdefault(block, [])
            if node in free_set:
                blocks[block].append(node)
    if not blocks or nodes < 1:
        return None
    if nodes == 1 and release >= (26, 5):
        first = sorted((n for members in blocks.values() for n in members), key=slurm_sort_key)
        return first[:1] or None
    base = topology.block_sizes[0] if topology.block_sizes else \
        max(sum(1 for n in topology.nodes if topology.domains.get(n) == b) for b in blocks)
    size = segment or nodes
    if (segment and segment > base) or nodes % size:
        return None
    if size <= base:
        return _base_block_segments(blocks, size, nodes // size)
    out: list[str] = []
    for _ in range(nodes // size):
        taken = _one_segment(blocks, size, base, list(pairwise(topology.block_sizes)))
        if taken is None:
            return None
        out += taken
    return sorted(out, key=slurm_sort_key)


def _base_block_segments(blocks: dict[str, list[str]], need: int,
                         count: int) -> list[str] | None:
    """``count`` segments of ``need`` nodes, each no larger than a base block: what
    ``_one_segment`` does at the lowest level (the block with the fewest free nodes that holds
    a segment, the last on ties; its first free nodes), with the blocks kept in buckets by
    free nodes so a segment costs a block size, not the number of blocks (100k-GPU clusters
    have thousands of blocks and thousands of segments)."""
    names = list(blocks)
    free = [len(blocks[b]) for b in names]
    taken = [0] * len(names)
    buckets: dict[int, list[int]] = {}
    for k, c in enumerate(free):
        buckets.setdefault(c, []).append(k)  # ascending: the last is the last on ties
    most = max(free, default=0)
    out: list[str] = []
    for _ in range(count):
        fewest = next((c for c in range(need, most + 1) if buckets.get(c)), None)
        if fewest is None:
            return None
        c, k = fewest, buckets[fewest].pop()
        out += blocks[names[k]][taken[k]:taken[k] + need]
        taken[k] += need
        # Back among the blocks with fewer free nodes, in its place by index.
        insort(buckets.setdefault(c - need, []), k)
    return sorted(out, key=slurm_sort_key)


def _one_segment(blocks: dict[str, list[str]], need: int, base: int,
                 pairs: list[tuple[int, int]]) -> list[str] | None:
    """One segment of ``need`` nodes by Slurm's block rule (see ``block_rule``); the nodes
    taken are removed from ``blocks``."""
    names = list(blocks)
    span, level = 1, 0
    while span * base < need and span < len(names):
        span *= pairs[level][1] // pairs[level][0] if level < len(pairs) else 2
        level += 1
    groups = [names[i:i + span] for i in range(0, len(names), span)]
    counts = [sum(len(blocks[b]) for b in g) for g in groups]
    fitting = [k for k, c in enumerate(counts) if c >= need]
    if not fitting:
        return None
    group = groups[min(fitting, key=lambda k: (counts[k], -k))]
    out: list[str] = []
    left = [b for b in group if blocks[b]]
    while len(out) < need and left:
        rest = need - len(out)
        fit = [b for b in left if len(blocks[b]) >= rest]
        pick = (min(fit, key=lambda b: (len(blocks[b]), -names.index(b))) if fit
                else max(left, key=lambda b: (len(blocks[b]), names.index(b))))
        take = blocks[pick][:rest]
        blocks[pick] = blocks[pick][len(take):]
        out += take
        left.remove(pick)
    return out
