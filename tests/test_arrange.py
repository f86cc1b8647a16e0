"""Arranging a placement inside its minipods for the tiers below them (placement.arrange)."""

from __future__ import annotations

import random

from slurm_arnold.placement import JobShape, place
from slurm_arnold.placement.arrange import lower_tier_score, lower_tiers, tile_heights
from slurm_arnold.placement.plan import spreads_per_tier
from slurm_arnold.placement.weights import TierWeight
from slurm_arnold.topology import parse_topology

#: alpha 0.5 at full weight on every lower tier (the defaults weigh them half: same order).
EVEN = {"leaf": TierWeight(0.5, 0.5), "nvlink domain": TierWeight(0.5, 0.5)}

# One minipod of four leaves of four nodes.
FOUR_LEAVES = "".join(f"SwitchName=l{k} Nodes=n[{4 * k + 1:02d}-{4 * k + 4:02d}]\n"
                      for k in range(4)) + "SwitchName=s0 Switches=l[0-3]\n"


def test_a_full_minipod_is_tiled_for_its_leaves() -> None:
    topo = parse_topology(FOUR_LEAVES, "four-leaves")
    job = JobShape(tp=8, pp=4, dp=4, gpus_per_node=8)  # 16 cells of one node
    tiers = lower_tiers(topo)
    assert [name for name, _ in tiers] == ["leaf"]
    plain = place(topo, topo.nodes, job, algo="mip", alpha=0.5, lower_tiers=False)
    tiled = place(topo, topo.nodes, job, algo="mip", alpha=0.5)
    assert tiled.metrics == plain.metrics
    # A leaf holding cells of x stages and y pipelines holds at most x * y of them; four per
    # leaf and four leaves give DP spread d and PP spread p with d * p >= 4, so
    # 0.5 * (d + p) >= 2: the 2 x 2 tiles are the best there is. Laying pipelines (or DP
    # groups) along leaves gives 0.5 * (1 + 4).
    assert lower_tier_score(tiled.cells, EVEN, tiers) == (2.0,)
    assert lower_tier_score(plain.cells, EVEN, tiers) == (2.5,)
    leaf = next(t for t in spreads_per_tier(tiled.cells, topo) if t["tier"] == "leaf")
    assert (leaf["max_dp_spread"], leaf["max_pp_spread"]) == (2, 2)


def test_tile_heights_cover_small_tiles_and_divisors() -> None:
    assert tile_heights(1) == [1]
    assert tile_heights(12) == [1, 2, 3, 4, 5, 6, 7, 8, 12]
    assert tile_heights(64)[-3:] == [16, 32, 64]


def test_arranging_keeps_minipods_groups_and_free_nodes_on_fragmented_racks() -> None:
    from benchmarks.clusters import fragment
    from benchmarks.placement_nvl import nvl_cluster

    improved = 0
    for seed, (tp, pp, share) in enumerate(((8, 4, 0.3), (8, 8, 0.5), (16, 4, 0.4),
                                             (4, 2, 0.2))):
        rng = random.Random(seed)
        topo = nvl_cluster(4 * 18 * 40, rng)
        free = fragment(topo, 0.5, rng)
        m = max(1, tp // 4)
        job = JobShape.from_nodes(int(len(free) * share) // (pp * m) * (pp * m), tp, pp, 4)
        plain = place(topo, free, job, algo="mip", alpha=0.5, lower_tiers=False)
        arranged = place(topo, free, job, algo="mip", alpha=0.5)
        assert arranged.metrics == plain.metrics
        nodes = arranged.nodes()
        assert len(nodes) == len(set(nodes)) == job.nodes and set(nodes) <= set(free)
        assert all(len({topo.domains[n] for n in cell}) == 1
                   for cell in arranged.cells.values())
        assert all(len({topo.minipod_of(n) for n in arranged.cells[c]}) == 1
                   and topo.minipod_of(arranged.cells[c][0]) == topo.minipod_of(
                       plain.cells[c][0]) for c in plain.cells)
        tiers = lower_tiers(topo)
        assert [name for name, _ in tiers] == ["leaf", "nvlink domain"]
        before = sum(lower_tier_score(plain.cells, EVEN, tiers))
        after = sum(lower_tier_score(arranged.cells, EVEN, tiers))
        assert after <= before
        improved += after < before
    assert improved >= 2, "arranging should tighten racks and leaves on fragmented clusters"


# Two minipods, each of one leaf of four nodes and two leaves of two.
TWO_UNEVEN_PODS = (
    "SwitchName=a0 Nodes=n[01-04]\nSwitchName=a1 Nodes=n[05-06]\nSwitchName=a2 Nodes=n[07-08]\n"
    "SwitchName=b0 Nodes=n[09-12]\nSwitchName=b1 Nodes=n[13-14]\nSwitchName=b2 Nodes=n[15-16]\n"
    "SwitchName=pa Switches=a[0-2]\nSwitchName=pb Switches=b[0-2]\n"
    "SwitchName=core Switches=pa,pb\n")


def test_stages_sharing_minipods_take_turns_at_the_fullest_leaf() -> None:
    """Two stages share both minipods, four units each in each. Whichever stage goes first
    fills a minipod's four-node leaf and the other needs both small leaves; going first in
    every minipod gives one stage 2 leaves and the other 4, taking turns gives both 3."""
    from slurm_arnold.placement.arrange import arrange
    from slurm_arnold.placement.pool import Pool

    topo = parse_topology(TWO_UNEVEN_PODS, "two-uneven-pods")
    job = JobShape(tp=8, pp=2, dp=8, gpus_per_node=8)
    cells = {}
    for col in range(8):
        pod = topo.nodes[:8] if col < 4 else topo.nodes[8:]
        cells[(0, col)] = [pod[2 * (col % 4)]]
        cells[(1, col)] = [pod[2 * (col % 4) + 1]]
    tiers = lower_tiers(topo)
    assert lower_tier_score(cells, EVEN, tiers) == (3.5,)
    out = arrange(cells, Pool.build(topo, topo.nodes, job), job, 0.5, EVEN)
    # DP 3 and PP 2 at the leaves is the best there is: keeping every pipeline in one leaf
    # puts each stage in all three leaves of both minipods (0.5 x 6 + 0.5 x 1).
    assert lower_tier_score(out, EVEN, tiers) == (2.5,)
    assert {topo.minipod_of(out[c][0]) for c in out if c[1] < 4} == {"pa"}
