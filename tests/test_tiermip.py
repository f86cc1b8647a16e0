"""The tier model (placement.tiermip) and the unit-moving repair (placement.repair).

The model is a relaxation: checked against every placement of small instances (infeasible
only where no placement meets the bars, a solution wherever one does). The repair and the
two together are checked on a fragmented deep tree where the MIP's own answer, arranged,
loses a tier to a rival.
"""

from __future__ import annotations

import itertools
import random

import pytest

from slurm_arnold.placement import JobShape, place
from slurm_arnold.placement.baselines import BASELINES, block_rule
from slurm_arnold.placement.dominate import explain, regret, tier_vector
from slurm_arnold.placement.plan import Cell, cells_from_rank_order, tier_places
from slurm_arnold.placement.repair import repair
from slurm_arnold.placement.tiermip import (
    TierProblem,
    cells_from_domain_layout,
    layout_from_tier_counts,
    nodes_by_domain,
    solve_tiers,
)
from slurm_arnold.placement.weights import default_weights
from slurm_arnold.topology import Topology, parse_topology

# Two minipods, each of two leaves of two racks (NVLink domains); racks of 2 or 3 nodes.
TREE = ("SwitchName=l0 Nodes=n[01-05]\nSwitchName=l1 Nodes=n[06-09]\n"
        "SwitchName=l2 Nodes=n[10-14]\nSwitchName=l3 Nodes=n[15-18]\n"
        "SwitchName=s0 Switches=l[0-1]\nSwitchName=s1 Switches=l[2-3]\n"
        "SwitchName=core Switches=s[0-1]\n")
RACKS = {"r0": "n01 n02", "r1": "n03 n04 n05", "r2": "n06 n07", "r3": "n08 n09",
         "r4": "n10 n11 n12", "r5": "n13 n14", "r6": "n15 n16", "r7": "n17 n18"}
EVEN = (0.5, 0.5)


def _topology() -> Topology:
    topo = parse_topology(TREE, "tiers")
    topo.domains.update({n: r for r, ns in RACKS.items() for n in ns.split()})
    return topo


def _problem(topo: Topology, free: list[str], stages: int, columns: int,
             bars: list[float]) -> TierProblem:
    wheres = [where for _, where in tier_places(topo)]
    nodes_of: dict[str, list[str]] = {}
    for n in free:
        nodes_of.setdefault(topo.domains[n], []).append(n)
    return TierProblem({d: len(ns) for d, ns in nodes_of.items()},
                       [{d: where(ns[0]) for d, ns in nodes_of.items()} for where in wheres],
                       [EVEN] * len(wheres), bars, stages, columns)


def _vector(cells: dict[Cell, list[str]], topo: Topology) -> list[float]:
    from slurm_arnold.placement.plan import spreads_per_tier
    return [0.5 * e["max_dp_spread"] + 0.5 * e["max_pp_spread"]
            for e in spreads_per_tier(cells, topo)]


def _every_placement(free: list[str], stages: int, columns: int):  # type: ignore[no-untyped-def]
    """Every way to put the stages x columns one-node units on distinct free nodes, up to
    the order of nodes inside a rack (which no tier sees)."""
    cells = [(j, k) for j in range(stages) for k in range(columns)]
    for nodes in itertools.permutations(free, len(cells)):
        yield {c: [n] for c, n in zip(cells, nodes, strict=True)}


@pytest.mark.parametrize("seed", range(6))
def test_the_tier_model_is_infeasible_exactly_where_no_placement_meets_the_bars(
        seed: int) -> None:
    topo = _topology()
    rng = random.Random(seed)
    free = sorted(rng.sample(topo.nodes, 8))
    stages, columns = rng.choice([(2, 2), (2, 3), (3, 2)])
    vectors = {tuple(_vector(c, topo)) for c in _every_placement(free, stages, columns)}
    tiers = len(next(iter(vectors)))
    checked = set()
    # Random bars, and one placement's own vector (met by it, so the model must be feasible).
    draws = [[rng.choice([1.0, 1.5, 2.0, 2.5]) for _ in range(tiers - 1)] + [1.0]
             for _ in range(12)]
    for bars in [*draws, list(min(vectors))]:
        met = any(all(v <= b + 1e-9 for v, b in zip(vec, bars, strict=True))
                  for vec in vectors)
        result = solve_tiers(_problem(topo, free, stages, columns, bars), node_limit=10_000,
                             time_limit=60)
        assert result.proven_impossible == (not met), (bars, result.status)
        checked.add(met)
        if met:
            # Its DP spreads are exact; the layout it gives is a real placement.
            assert result.counts is not None
            nodes_of = nodes_by_domain(free, topo.domains.__getitem__,
                                       [where for _, where in tier_places(topo)])
            assert nodes_of is not None
            cells = cells_from_domain_layout(
                layout_from_tier_counts(result.counts, list(nodes_of)), nodes_of, 1)
            used = [n for ns in cells.values() for n in ns]
            assert len(used) == len(set(used)) == stages * columns and set(used) <= set(free)
    assert checked == {True, False}, "every seed's draws must test both outcomes"


def test_a_proven_impossible_bar_is_said_in_one_line() -> None:
    topo = _topology()
    free = ["n01", "n02", "n06", "n07"]  # two racks of two nodes
    # A 2 x 2 job in one rack at every tier: four units in a rack of two. Impossible.
    result = solve_tiers(_problem(topo, free, 2, 2, [1.0, 1.0, 1.0, 1.0]), node_limit=100,
                         time_limit=10)
    assert result.proven_impossible and result.counts is None
    line = explain({"source": "ours", "rival_tiers_worse_before": 1,
                    "rival_tiers_worse_after": 1,
                    "tier_model": {"status": "infeasible", "proven_impossible": True}})
    assert line is not None and "proved" in line
    assert explain({"source": "ours", "rival_tiers_worse_before": 1,
                    "rival_tiers_worse_after": 1,
                    "tier_model": {"status": "nodelimit", "proven_impossible": False}}) is None


def test_layout_lines_stages_up_in_tree_order() -> None:
    counts = [{"b": 1, "a": 2}, {"a": 1, "b": 2}]
    assert layout_from_tier_counts(counts, ["a", "b"]) == [["a", "a", "b"], ["a", "b", "b"]]


def test_repair_moves_units_until_every_tier_meets_its_bar() -> None:
    topo = _topology()
    free = topo.nodes
    wheres = [where for _, where in tier_places(topo)]
    # Stage 0 split over both minipods; a free rack next to its other unit takes it home.
    cells = {(0, 0): ["n01"], (0, 1): ["n10"], (1, 0): ["n03"], (1, 1): ["n04"]}
    before = _vector(cells, topo)
    bars = [1.5, 1.5, 1.0, 1.0]
    assert any(v > b for v, b in zip(before, bars, strict=True))
    fixed = repair(cells, free, topo.domains.__getitem__, wheres, bars, [EVEN] * 4, 1)
    assert fixed is not None
    assert all(v <= b + 1e-9 for v, b in zip(_vector(fixed, topo), bars, strict=True))
    used = [n for ns in fixed.values() for n in ns]
    assert len(used) == len(set(used)) == 4 and set(used) <= set(free)
    for cell, nodes in cells.items():  # a unit in the domain it started in keeps its nodes
        if topo.domains[fixed[cell][0]] == topo.domains[nodes[0]]:
            assert fixed[cell] == nodes
    # A domain across two leaves: units cannot be moved domain by domain.
    across = {**topo.domains, "n06": "r1"}  # rack r1 (leaf l0) takes a node of leaf l1
    assert nodes_by_domain(free, across.__getitem__, wheres) is None
    assert repair(cells, free, across.__getitem__, wheres, bars, [EVEN] * 4, 1) is None
    # Bars no placement meets: nothing comes back.
    assert repair(cells, free, topo.domains.__getitem__, wheres, [0.5] * 4, [EVEN] * 4,
                  1) is None


@pytest.fixture
def nets_not_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tier model's and the regions' safety nets out of the way: their work limits alone
    decide, so the answer does not depend on how busy the machine running the test is."""
    from slurm_arnold.placement import engine

    monkeypatch.setattr(engine, "TIER_SECONDS", 120.0)
    monkeypatch.setattr(engine, "REGION_SECONDS", 120.0)


def _deep_case(seed: int) -> tuple[Topology, list[str], JobShape]:
    """A fragmented NVL cluster with super-spines and a job, drawn as the development search
    that found the cases below drew them."""
    from benchmarks.clusters import fragment
    from benchmarks.placement_nvl import nvl_cluster

    rng = random.Random(seed)
    racks = rng.choice([60, 120, 200])
    topo = nvl_cluster(4 * 18 * racks, rng, rng.choice([2, 3]))
    free = fragment(topo, rng.choice([0.5, 0.7]), rng)
    tp, pp = rng.choice([(8, 4), (8, 8), (16, 4), (16, 8), (8, 2)])
    share = rng.choice([0.25, 0.4, 0.6])
    unit = pp * tp // 4
    return topo, free, JobShape.from_nodes(int(len(free) * share) // unit * unit, tp, pp, 4)


def _rivals(topo: Topology, free: list[str], job: JobShape) -> list[dict[Cell, list[str]]]:
    out = [cells_from_rank_order(block_rule(topo, free, job.nodes, job.nodes_per_unit) or [],
                                 job)]
    for algo in BASELINES:
        cells = place(topo, free, job, algo=algo, alpha=0.5).cells
        if all(len({topo.domains[n] for n in c}) == 1 for c in cells.values()):
            out.append(cells)
    return out


@pytest.mark.parametrize("seed", [224, 169])
def test_place_takes_the_tier_models_placement_when_no_candidate_is_nowhere_worse(
        seed: int, nets_not_binding: None) -> None:
    from slurm_arnold.placement import engine

    topo, free, job = _deep_case(seed)
    weights = default_weights(topo, 0.5)
    # Without the tier model, no candidate (nor moving units) wins the lost tier back.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(engine, "TIER_MAX_VARS", 0)
        without = place(topo, free, job, algo="mip", alpha=0.5,
                        time_limit=120).info["dominance"]
    assert without["rival_tiers_worse_after"] > 0 and "tier_model" not in without
    got = place(topo, free, job, algo="mip", alpha=0.5, time_limit=120)
    doc = got.info["dominance"]
    assert doc["rival_tiers_worse_before"] > 0
    assert doc["source"] == "the tier model" and doc["rival_tiers_worse_after"] == 0
    assert doc["tier_model"]["proven_impossible"] is False
    bars = [tier_vector(c, topo, weights) for c in _rivals(topo, free, job)]
    assert regret(tier_vector(got.cells, topo, weights), bars) == 0
    nodes = got.nodes()
    assert len(set(nodes)) == job.nodes and set(nodes) <= set(free)
    assert all(len({topo.domains[n] for n in cell}) == 1 for cell in got.cells.values())
    assert got.info["source"] == "the tier model"


def test_place_says_when_the_tier_model_proves_no_placement_meets_every_bar(
        nets_not_binding: None) -> None:
    """Random tree 37 of `arnold bench placement --nvl`: the MIP's answer loses a tier to a
    rival, and the tier model proves that no placement is as good as the rivals' best at
    every tier (the proof's soundness is the brute-force test above)."""
    from benchmarks.placement_nvl import random_tree

    drawn = random_tree(37)
    assert drawn is not None
    topo, free, job = drawn
    got = place(topo, free, job, algo="mip", alpha=0.5, time_limit=120)
    doc = got.info["dominance"]
    assert doc["rival_tiers_worse_before"] > 0 and doc["rival_tiers_worse_after"] > 0
    assert doc["tier_model"]["proven_impossible"] is True
    assert doc["tier_model"]["status"] == "infeasible"
    line = explain(doc)
    assert line is not None and "proved that no placement" in line
    # A trade that still loses a tier says the same after its own line.
    traded = explain(doc | {"source": "the MIP within rival's leaf switches"})
    assert traded is not None and traded.startswith("kept the MIP within")
    assert traded.endswith("the tier model proved that no placement is nowhere worse than them")
