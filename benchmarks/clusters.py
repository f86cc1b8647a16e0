"""Seeded synthetic fat trees, fragmented by replaying a job mix.

Minipods have unequal sizes (leaf counts vary) and leaves unequal node counts, as real halls
grow in stages. Occupancy comes from replaying jobs: jobs of 1 to 64 nodes (at most an eighth
of the cluster; sizes drawn log-uniformly) arrive, are placed by a topology-blind first fit
over a node order that is shuffled by rack, and leave after random lifetimes; the replay
stops once the target share of nodes is busy, so the free nodes are scattered the way a busy
cluster's are.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass

from slurm_arnold.topology import Topology, parse_topology


@dataclass(frozen=True)
class Scale:
    """One cluster size of the suite."""

    name: str
    gpus: int
    minipods: int
    leaves_per_minipod: tuple[int, int]
    nodes_per_leaf: tuple[int, int]


SCALES = {
    "1k": Scale("1k", 1_024, 4, (2, 5), (8, 16)),
    "12k": Scale("12k", 12_288, 12, (6, 12), (12, 20)),
    "100k": Scale("100k", 100_000, 40, (8, 16), (16, 24)),
}


def build_tree(scale: Scale, rng: random.Random, gpus_per_node: int = 8) -> Topology:
    """A fat tree with about ``scale.gpus`` GPUs and unequal minipods."""
    target = scale.gpus // gpus_per_node
    pods: list[list[int]] = []
    for _ in range(scale.minipods):
        leaves = rng.randint(*scale.leaves_per_minipod)
        pods.append([rng.randint(*scale.nodes_per_leaf) for _ in range(leaves)])
    total = sum(sum(p) for p in pods)
    # Scale leaf sizes so the cluster has the scale's node count exactly.
    factor = target / total
    sizes = [[max(1, math.floor(n * factor)) for n in pod] for pod in pods]
    short = target - sum(sum(p) for p in sizes)
    i = 0
    while short > 0:
        pod = sizes[i % len(sizes)]
        pod[i % len(pod)] += 1
        short -= 1
        i += 1
    lines = []
    node = 0
    leaf = 0
    width = len(str(target))
    for p, pod in enumerate(sizes):
        first_leaf = leaf
        for count in pod:
            first, last = f"{node:0{width}d}", f"{node + count - 1:0{width}d}"
            lines.append(f"SwitchName=leaf{leaf} Nodes=n[{first}-{last}]")
            node += count
            leaf += 1
        lines.append(f"SwitchName=pod{p} Switches=leaf[{first_leaf}-{leaf - 1}]")
    lines.append(f"SwitchName=core Switches=pod[0-{len(sizes) - 1}]")
    return parse_topology("\n".join(lines) + "\n", f"synthetic-{scale.name}")


def fragment(topology: Topology, occupancy: float, rng: random.Random) -> list[str]:
    """Replay a job mix until ``occupancy`` of the nodes are busy; return the free nodes."""
    leaves = topology.leaves()
    rng.shuffle(leaves)  # the blind scheduler's order: racks in an arbitrary order
    order = [n for leaf in leaves for n in topology.switches[leaf].children]
    free_heap = list(range(len(order)))  # first fit: the lowest free positions
    busy: set[int] = set()
    running: list[tuple[float, list[int]]] = []
    now = 0.0
    target = int(occupancy * len(order))
    largest = max(2, min(64, len(order) // 8))
    # Lifetimes long enough that the steady state would fill the whole cluster (mean size of
    # a log-uniform job is (largest - 1) / ln(largest)), so every target is reached, with the
    # departures along the way leaving the holes.
    lifetime = len(order) * math.log(largest) / (largest - 1)
    while len(busy) < target:
        now += rng.expovariate(1.0)
        while running and running[0][0] <= now:
            _, released = heapq.heappop(running)
            for i in released:
                busy.discard(i)
                heapq.heappush(free_heap, i)
        size = min(int(math.exp(rng.uniform(0, math.log(largest)))), target - len(busy))
        taken = [heapq.heappop(free_heap) for _ in range(size)]
        busy.update(taken)
        heapq.heappush(running, (now + rng.expovariate(1 / lifetime), taken))
    busy_names = {order[i] for i in busy}
    return [n for n in topology.nodes if n not in busy_names]
