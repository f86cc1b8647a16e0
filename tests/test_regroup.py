"""Choosing the minipods for the tiers above them (placement.regroup)."""

from __future__ import annotations

import random

from benchmarks.clusters import fragment
from slurm_arnold.placement import JobShape, place
from slurm_arnold.placement.plan import spreads_per_tier
from slurm_arnold.placement.regroup import upper_tiers
from slurm_arnold.topology import Topology, parse_topology


def deep_tree(groups: int = 4, pods: int = 4, leaves: int = 4, nodes: int = 8) -> Topology:
    """Leaves of ``nodes`` under minipods under ``groups`` super-spine groups under a core."""
    lines, n, leaf, pod = [], 0, 0, 0
    for g in range(groups):
        members = []
        for _ in range(pods):
            under = []
            for _ in range(leaves):
                lines.append(f"SwitchName=leaf{leaf} Nodes=n[{n:04d}-{n + nodes - 1:04d}]")
                under.append(f"leaf{leaf}")
                n, leaf = n + nodes, leaf + 1
            lines.append(f"SwitchName=pod{pod} Switches={','.join(under)}")
            members.append(f"pod{pod}")
            pod += 1
        lines.append(f"SwitchName=grp{g} Switches={','.join(members)}")
    lines.append(f"SwitchName=core Switches=grp[0-{groups - 1}]")
    return parse_topology("\n".join(lines) + "\n", "deep")


def group_spreads(cells: dict[tuple[int, int], list[str]], topo: Topology) -> tuple[int, int]:
    tier = next(t for t in spreads_per_tier(cells, topo) if t["tier"] == "level 2")
    return tier["max_dp_spread"], tier["max_pp_spread"]


def test_only_tiers_that_more_than_one_switch_forms_count() -> None:
    assert upper_tiers(deep_tree()) == [("level 2", 2)]
    two = parse_topology("SwitchName=a Nodes=x[1-4]\nSwitchName=b Nodes=x[5-8]\n"
                         "SwitchName=p0 Switches=a\nSwitchName=p1 Switches=b\n"
                         "SwitchName=c Switches=p[0-1]\n", "two")
    assert upper_tiers(two) == []  # only the core above the minipods


def test_the_largest_minipods_give_way_to_one_group_that_holds_the_job() -> None:
    """pod0 (8 free) and pod1 (7 free) share group 0; pod2 (8 free) is in group 1. A job of
    15 one-node units needs two minipods; the two largest are in different groups, but
    group 0 alone holds it: same minipod spreads, one group instead of two."""
    topo = deep_tree(groups=2, pods=2, leaves=1, nodes=8)
    free = [f"n{i:04d}" for i in (*range(0, 8), *range(8, 15), *range(16, 24))]
    job = JobShape(tp=8, pp=1, dp=15, gpus_per_node=8)
    plain = place(topo, free, job, lower_tiers=False)
    chosen = place(topo, free, job)
    assert chosen.metrics == plain.metrics
    assert group_spreads(plain.cells, topo) == (2, 1)  # the DP group crosses groups
    assert group_spreads(chosen.cells, topo) == (1, 1)
    assert {topo.minipod_of(nodes[0]) for nodes in chosen.cells.values()} == {"pod0", "pod1"}


def test_regrouping_keeps_minipod_spreads_and_free_nodes_and_never_spreads_groups() -> None:
    tighter = 0
    for seed in range(6):
        rng = random.Random(seed)
        topo = deep_tree()
        free = fragment(topo, 0.5, rng)
        for pp, share in ((4, 0.3), (8, 0.45), (2, 0.2)):
            job = JobShape.from_nodes(int(len(free) * share) // pp * pp, 8, pp, 8)
            plain = place(topo, free, job, lower_tiers=False)
            chosen = place(topo, free, job)
            assert chosen.metrics == plain.metrics
            nodes = chosen.nodes()
            assert len(nodes) == len(set(nodes)) == job.nodes and set(nodes) <= set(free)
            before, after = group_spreads(plain.cells, topo), group_spreads(chosen.cells, topo)
            assert sum(after) <= sum(before), (seed, pp)
            tighter += sum(after) < sum(before)
    assert tighter >= 3, "choosing minipods by group should tighten the tier above them"
