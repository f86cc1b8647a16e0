"""Stages placed one by one under DP caps (``placement.stagemip``): the caps' arithmetic,
that a placement within them meets every bar however its pipelines are lined up, and that
the stage models stop where the room runs out."""

from __future__ import annotations

import itertools

import pytest

from slurm_arnold.placement.stagemip import build_stage_model, dp_caps, place_stages
from slurm_arnold.placement.stagepack import weighted_tiers
from slurm_arnold.placement.tiermip import TierProblem
from tests.test_tiermip import _problem, _topology


def test_caps_leave_each_tier_room_for_the_widest_pipeline() -> None:
    topo = _topology()  # 8 racks, 4 leaves, 2 minipods, 1 core
    problem = _problem(topo, sorted(topo.nodes), 3, 4, [3.5, 2.5, 2.0, 1.0])
    # (bar - 0.5 x min(3 stages, places)) / 0.5: racks 7 - 3, leaves 5 - 3, minipods 4 - 2,
    # the core 2 - 1.
    assert dp_caps(problem) == [4, 2, 2, 1]
    problem.bars = [3.5, 1.5, 2.0, 1.0]  # leaves: 3 - 3 = 0, no room for any stage
    assert dp_caps(problem) is None


def test_a_zero_alpha_tier_caps_nothing_but_its_pipelines() -> None:
    topo = _topology()
    problem = _problem(topo, sorted(topo.nodes), 2, 2, [9.0, 9.0, 9.0, 9.0])
    problem.weights = [(0.0, 0.5), *problem.weights[1:]]
    problem.bars = [1.0, 9.0, 9.0, 9.0]  # 0.5 x min(2, 8 racks) = 1.0: pipelines fit
    assert dp_caps(problem) == [8, 16, 16, 17]
    problem.bars = [0.5, 9.0, 9.0, 9.0]
    assert dp_caps(problem) is None


def test_the_stage_model_names_its_constraint_families() -> None:
    topo = _topology()
    problem = _problem(topo, sorted(topo.nodes), 2, 3, [9.0] * 4)
    model, _ = build_stage_model(problem, dict(problem.capacities), [4, 2, 2, 1])
    families = {c.name.split("(")[0] for c in model.getConss()}
    assert families == {"StageComplete", "ClassDomains", "PlaceUses", "DomainCap", "PlaceCap"}


def _spreads(problem: TierProblem, counts: list[dict[str, int]]) -> list[int]:
    """The largest DP spread of any stage at each tier."""
    return [max(len({where[d] for d in row}) for row in counts) for where in problem.places]


@pytest.mark.parametrize("bars", [[3.5, 2.5, 2.0, 1.0], [4.0, 2.5, 1.5, 1.0],
                                  [3.0, 2.5, 2.0, 1.0], [5.0, 3.0, 2.0, 1.0]])
def test_stages_within_their_caps_meet_every_bar_in_any_lineup(bars: list[float]) -> None:
    topo = _topology()
    problem = _problem(topo, sorted(topo.nodes), 3, 4, bars)
    caps = dp_caps(problem)
    assert caps is not None
    run = place_stages(problem)
    assert run is not None and run.counts is not None
    assert run.stages_placed == problem.stages
    assert [sum(row.values()) for row in run.counts] == [problem.columns] * problem.stages
    for d, cap in problem.capacities.items():
        assert sum(row.get(d, 0) for row in run.counts) <= cap
    assert all(s <= c for s, c in zip(_spreads(problem, run.counts), caps, strict=True))
    assert all(v <= b + 1e-9 for v, b in zip(weighted_tiers(problem, run.counts), bars,
                                             strict=True))
    # Any other order of the domains lines the pipelines up differently: still within.
    for order in itertools.islice(itertools.permutations(problem.capacities), 0, 200, 7):
        shuffled = TierProblem({d: problem.capacities[d] for d in order}, problem.places,
                               problem.weights, bars, problem.stages, problem.columns)
        assert all(v <= b + 1e-9 for v, b in zip(weighted_tiers(shuffled, run.counts), bars,
                                                 strict=True))


def test_the_stage_models_stop_where_the_room_runs_out() -> None:
    topo = _topology()
    # 3 stages of 5 one-node units, every stage in at most 2 racks: racks of 3 hold one
    # stage (3 + 2), but only two racks have 3 nodes, and a rack of 2 and 2 is 4 < 5.
    problem = _problem(topo, sorted(topo.nodes), 3, 5, [2.5, 9.0, 9.0, 9.0])
    assert dp_caps(problem) == [2, 15, 16, 17]
    run = place_stages(problem)
    assert run is not None and run.counts is None
    assert run.stages_placed == 2 and run.status == "infeasible"
    assert run.as_json()["stages_placed"] == 2


@pytest.mark.parametrize("index", [3, 25])
def test_place_keeps_the_stage_models_placement_when_every_stage_fits_its_caps(
        index: int) -> None:
    """Random trees 3 and 25 of `arnold bench placement --nvl`: the MIP's arranged answer
    loses tiers to rivals, no stage packing meets every bar, the stage models do."""
    from benchmarks.placement_nvl import random_tree
    from slurm_arnold.placement import JobShape, engine, place, stagemip
    from slurm_arnold.placement.dominate import regret, tier_vector
    from slurm_arnold.placement.weights import default_weights
    from tests.test_tiermip import _rivals

    drawn = random_tree(index)
    assert drawn is not None
    topo, free, job = drawn
    assert isinstance(job, JobShape)
    weights = default_weights(topo, 0.5)
    bars = [tier_vector(c, topo, weights) for c in _rivals(topo, free, job)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stagemip, "place_stages", lambda *_, **__: None)
        patch.setattr(engine, "TIER_MAX_VARS", 0)
        without = place(topo, free, job, algo="mip", alpha=0.5, time_limit=120)
    assert regret(tier_vector(without.cells, topo, weights), bars) > 0
    got = place(topo, free, job, algo="mip", alpha=0.5, time_limit=120)
    doc = got.info["dominance"]
    assert doc["source"] == "stage packing (each stage by its own MIP)"
    assert doc["rival_tiers_worse_before"] > 0 and doc["rival_tiers_worse_after"] == 0
    assert doc["stage_models"]["stages_placed"] == job.pp
    assert regret(tier_vector(got.cells, topo, weights), bars) == 0
    nodes = got.nodes()
    assert len(set(nodes)) == job.nodes and set(nodes) <= set(free)
    assert all(len({topo.domains[n] for n in cell}) == 1 for cell in got.cells.values())
