"""Stage packing (``placement.stagepack``): whole stages packed into the fewest places, and
``arnold place`` keeping such a packing where the MIP's answer loses a tier to a rival."""

from __future__ import annotations

import random

import pytest

from slurm_arnold.placement import JobShape, place
from slurm_arnold.placement.dominate import explain, regret, tier_vector
from slurm_arnold.placement.plan import tier_places
from slurm_arnold.placement.stagepack import packed_counts, packings, weighted_tiers
from slurm_arnold.placement.tiermip import (
    TierProblem,
    cells_from_domain_layout,
    layout_from_tier_counts,
    nodes_by_domain,
)
from slurm_arnold.placement.weights import default_weights
from slurm_arnold.topology import Topology, spread_tiers
from tests.test_tiermip import _problem, _rivals, _topology


def _tree_problem(topo: Topology, free: list[str], job: JobShape) -> tuple[
        TierProblem, dict[str, list[str]]]:
    """The tier problem ``placement.engine`` poses for ``job`` on ``free``, bars left open."""
    wheres = [where for _, where in tier_places(topo)]
    nodes_of = nodes_by_domain(free, lambda n: topo.domains.get(n, n), wheres)
    assert nodes_of is not None
    weights = default_weights(topo, 0.5)
    problem = TierProblem.of_free(
        nodes_of, wheres, [(weights[t].alpha, weights[t].beta) for t in spread_tiers(topo)],
        [99.0] * len(wheres), job.pp, job.columns, job.nodes_per_unit)
    return problem, nodes_of


def test_best_fit_takes_the_tightest_places_and_worst_fit_the_roomiest() -> None:
    topo = _topology()  # racks r0-r7 of 2, 3, 2, 2, 3, 2, 2, 2 nodes; one-node units
    problem = _problem(topo, sorted(topo.nodes), 2, 2, [9.0] * 4)
    # Best fit: the first minipod (a tie), its leaf with less room (l1), its first rack.
    assert packed_counts(problem, 1, "best") == [{"r2": 2}, {"r3": 2}]
    # Worst fit: the minipod, leaf and rack with the most room each time.
    assert packed_counts(problem, 1, "worst") == [{"r1": 2}, {"r4": 2}]
    # Both stages at once (4 units): l1 holds them but no rack of it does, so the largest
    # rack is filled and the rest goes to the next; the first stage takes the first units.
    assert packed_counts(problem, 2, "best") == [{"r2": 2}, {"r3": 2}]
    wide = _problem(topo, sorted(topo.nodes), 1, 4, [9.0] * 4)
    assert packed_counts(wide, 1, "best") == [{"r2": 2, "r3": 2}]
    # From the racks down (the tiers above ignored): the tightest rack that holds a stage.
    assert packed_counts(problem, 1, "best", top=0) == [{"r0": 2}, {"r2": 2}]


def test_no_packing_without_room_or_with_a_group_that_does_not_divide_the_stages() -> None:
    topo = _topology()
    problem = _problem(topo, sorted(topo.nodes), 3, 6, [9.0] * 4)  # 18 units in 18 nodes
    assert packed_counts(problem, 2, "best") is None
    assert packed_counts(problem, 3, "best") is not None
    assert packed_counts(_problem(topo, sorted(topo.nodes), 3, 7, [9.0] * 4), 1,
                         "best") is None
    names = [name for name, _ in packings(problem, ["nvlink domain", "leaf", "minipod",
                                                    "core"])]
    assert len(names) == len(set(names)) == 4 * 2 * 2  # tiers x groups (1, 3) x fits
    assert names[0] == "stage packing (1 stage at a time, best fit, from the core switches down)"
    assert names[-1] == ("stage packing (3 stages at a time, worst fit, from the NVLink "
                         "domains down)")


@pytest.mark.parametrize("seed", range(4))
def test_every_packing_is_a_placement_and_its_tiers_are_what_the_cells_measure(
        seed: int) -> None:
    from benchmarks.placement_nvl import random_tree

    drawn = random_tree(seed, seed=7)
    assert drawn is not None
    topo, free, job = drawn
    problem, nodes_of = _tree_problem(topo, free, job)
    weights = default_weights(topo, 0.5)
    seen = 0
    for _, counts in packings(problem, ["unused"] * len(problem.places)):
        assert [sum(row.values()) for row in counts] == [job.columns] * job.pp
        used: dict[str, int] = {}
        for row in counts:
            for d, k in row.items():
                used[d] = used.get(d, 0) + k
        assert all(k <= problem.capacities[d] for d, k in used.items())
        cells = cells_from_domain_layout(layout_from_tier_counts(counts, list(nodes_of)),
                                         nodes_of, job.nodes_per_unit)
        nodes = [n for ns in cells.values() for n in ns]
        assert len(nodes) == len(set(nodes)) == job.nodes and set(nodes) <= set(free)
        assert all(len({topo.domains[n] for n in ns}) == 1 for ns in cells.values())
        assert weighted_tiers(problem, counts) == pytest.approx(
            list(tier_vector(cells, topo, weights)))
        seen += 1
    assert seen >= 2 * len(problem.places)


def test_place_keeps_a_stage_packing_where_the_mip_loses_a_tier() -> None:
    """The 10k-GPU case of `arnold bench placement --nvl` (first cluster, TP 8 x PP 8 on 60%
    of the free nodes) that the tier model is too big for: the MIP's answer, and every other
    candidate, loses the leaf tier to a baseline; packing stages meets every rival's best."""
    from benchmarks.clusters import fragment
    from benchmarks.placement_nvl import nvl_cluster
    from slurm_arnold.placement import stagepack

    rng = random.Random("0-nvl-10k-0")
    topo = nvl_cluster(10_000, rng)
    free = fragment(topo, 0.5, rng)
    nodes = int(len(free) * 0.6) // 16 * 16
    job = JobShape.from_nodes(nodes, 8, 8, 4)
    weights = default_weights(topo, 0.5)
    bars = [tier_vector(c, topo, weights) for c in _rivals(topo, free, job)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stagepack, "packings", lambda *_: iter(()))
        without = place(topo, free, job, algo="mip", alpha=0.5, time_limit=120)
    assert without.info["dominance"]["rival_tiers_worse_after"] > 0
    assert regret(tier_vector(without.cells, topo, weights), bars) > 0
    got = place(topo, free, job, algo="mip", alpha=0.5, time_limit=120)
    doc = got.info["dominance"]
    assert doc["source"].startswith("stage packing (")
    assert doc["rival_tiers_worse_before"] > 0 and doc["rival_tiers_worse_after"] == 0
    assert regret(tier_vector(got.cells, topo, weights), bars) == 0
    assert got.info["source"] == doc["source"]
    line = explain(doc)  # arnold place's line: the packing made its own layout
    assert line is not None and line.startswith(f"kept {doc['source']}: ")
    assert "laid out by arnold" not in line and "nowhere worse than them" in line
    nodes_used = got.nodes()
    assert len(set(nodes_used)) == job.nodes and set(nodes_used) <= set(free)
    assert all(len({topo.domains[n] for n in cell}) == 1 for cell in got.cells.values())

