"""Per-tier weights of the placement objective (placement.weights) and what they change."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from benchmarks.clusters import fragment
from benchmarks.placement_nvl import nvl_cluster
from site_config.settings import LinkTier, NetworkTiers
from slurm_arnold.cli.main import main
from slurm_arnold.errors import ArnoldError
from slurm_arnold.placement import JobShape, place
from slurm_arnold.placement.arrange import arrange, lower_tier_score, lower_tiers
from slurm_arnold.placement.baselines import block_rule
from slurm_arnold.placement.plan import cells_from_rank_order
from slurm_arnold.placement.pool import Pool
from slurm_arnold.placement.weights import (
    TierWeight,
    default_weights,
    parse_tier_weight,
    resolve,
)
from slurm_arnold.topology import Topology, parse_topology

TWO_TIERS = ("SwitchName=a Nodes=x[1-4]\nSwitchName=b Nodes=x[5-8]\n"
             "SwitchName=p0 Switches=a\nSwitchName=p1 Switches=b\nSwitchName=c Switches=p[0-1]\n")


def small_nvl(seed: int = 0, occupancy: float = 0.5) -> tuple[Topology, list[str]]:
    rng = random.Random(seed)
    topo = nvl_cluster(4 * 18 * 40, rng)
    return topo, fragment(topo, occupancy, rng)


def test_default_weights_follow_the_links_above_each_tier() -> None:
    topo, _ = small_nvl()
    weights = default_weights(topo, 0.25)
    assert list(weights) == ["nvlink domain", "leaf", "minipod", "core"]
    # The minipod tier is --alpha's; with 400 Gb/s everywhere and the core 2:1
    # oversubscribed, leaving a rack or a leaf costs half what leaving a minipod does.
    assert weights["minipod"] == TierWeight(0.25, 0.75)
    assert weights["leaf"] == weights["nvlink domain"] == TierWeight(0.125, 0.375)
    assert weights["core"] == TierWeight(0.25, 0.75)
    # Spine uplinks 4:1 oversubscribed: leaving a leaf now costs twice leaving a minipod;
    # leaving a rack (the leaf's own links) is unchanged.
    thin = NetworkTiers(minipod=LinkTier(bandwidth_gbps=400.0, latency_us=8.0,
                                         oversubscription=4.0))
    heavy = default_weights(topo, 0.5, thin)
    assert heavy["leaf"] == TierWeight(1.0, 1.0)
    assert heavy["nvlink domain"] == TierWeight(0.25, 0.25)


def test_overrides_apply_in_turn_and_bad_ones_are_refused() -> None:
    topo = parse_topology(TWO_TIERS, "two")
    site = {"leaf": 2.0}
    assert resolve(topo, 0.5, None, site=site)["leaf"] == TierWeight(1.0, 1.0)
    both = resolve(topo, 0.5, None, site=site, user={"leaf": (0.1, 0.9)})
    assert both["leaf"] == TierWeight(0.1, 0.9)
    # A site's weights name the tiers of every partition: one this tree lacks is skipped
    # (an NVLink domain, on a partition without blocks); a job's own is an error.
    nvl, _ = small_nvl()
    site_wide = {"nvlink domain": 2.0}
    assert resolve(topo, 0.5, None, site=site_wide) == resolve(topo, 0.5)
    assert resolve(nvl, 0.5, None, site=site_wide)["nvlink domain"] == TierWeight(1.0, 1.0)
    with pytest.raises(ArnoldError, match="--tier-weight: no tier named 'nvlink domain'"):
        resolve(topo, 0.5, None, user=site_wide)
    with pytest.raises(ArnoldError, match=r"site file's \[tier_weights\].*--alpha"):
        resolve(topo, 0.5, None, site={"minipod": 1.0})
    with pytest.raises(ArnoldError, match="--alpha"):
        resolve(topo, 0.5, None, user={"minipod": 1.0})
    with pytest.raises(ArnoldError, match="'leaf', 'minipod', 'core'"):
        resolve(topo, 0.5, None, user={"rack": 1.0})
    with pytest.raises(ArnoldError, match=">= 0"):
        resolve(topo, 0.5, None, user={"leaf": -1.0})
    assert parse_tier_weight("nvlink domain=0.2:0.8") == ("nvlink domain", (0.2, 0.8))
    assert parse_tier_weight("leaf=3") == ("leaf", 3.0)
    for bad in ("leaf", "leaf=x", "leaf=1:2:3", "=1", "leaf=inf", "leaf=-2"):
        with pytest.raises(ArnoldError):
            parse_tier_weight(bad)


def test_place_reports_the_objective_per_tier(tmp_path: Path, isolated_config: Path) -> None:
    topo_file = tmp_path / "t.conf"
    topo_file.write_text(TWO_TIERS)
    runner = CliRunner()
    base = ["place", "--topology", str(topo_file), "--gpus-per-node", "8", "--tp", "8",
            "--pp", "2", "--nodes", "6", "--alpha", "0.25", "--json"]
    doc = json.loads(runner.invoke(main, base).output)
    tiers = {t["tier"]: t for t in doc["per_tier"]}
    assert (tiers["minipod"]["alpha"], tiers["minipod"]["beta"]) == (0.25, 0.75)
    assert tiers["minipod"]["weighted_spread"] == doc["metrics"]["weighted_spread"]
    assert (tiers["leaf"]["alpha"], tiers["leaf"]["beta"]) == (0.125, 0.375)
    for t in tiers.values():
        assert t["weighted_spread"] == pytest.approx(
            t["alpha"] * t["max_dp_spread"] + t["beta"] * t["max_pp_spread"])
    assert doc["tier_objective"] == pytest.approx(sum(t["weighted_spread"]
                                                      for t in tiers.values()))
    heavier = json.loads(runner.invoke(main, [*base, "--tier-weight", "leaf=4"]).output)
    leaf = next(t for t in heavier["per_tier"] if t["tier"] == "leaf")
    assert (leaf["alpha"], leaf["beta"]) == (1.0, 3.0)
    refused = runner.invoke(main, [*base, "--tier-weight", "minipod=1"])
    assert refused.exit_code == 1 and "--alpha" in refused.output
    assert "Traceback" not in refused.output
    unknown = runner.invoke(main, [*base, "--tier-weight", "rack=1"])
    assert unknown.exit_code == 1 and "'leaf', 'minipod', 'core'" in unknown.output
    usage = runner.invoke(main, [*base, "--tier-weight", "leaf=abc"])
    assert usage.exit_code == 2 and "not a number" in usage.output


def test_the_config_file_sets_tier_weights(tmp_path: Path, isolated_config: Path) -> None:
    (isolated_config / "user.toml").write_text("[tier_weights]\nleaf = [0.5, 0.0]\n")
    topo_file = tmp_path / "t.conf"
    topo_file.write_text(TWO_TIERS)
    base = ["place", "--topology", str(topo_file), "--gpus-per-node", "8", "--tp", "8",
            "--pp", "2", "--nodes", "6", "--json"]
    result = CliRunner().invoke(main, base)
    assert result.exit_code == 0, result.output
    leaf = next(t for t in json.loads(result.output)["per_tier"] if t["tier"] == "leaf")
    assert (leaf["alpha"], leaf["beta"]) == (0.5, 0.0)


def test_weights_steer_the_tiers_below_the_minipod() -> None:
    """Weighing only the racks, or only the leaves, moves the arrangement their way: on
    fragmented NVL racks the two answers differ and each is at least as good as the other at
    its own tier (same candidates, each picked by its own tier)."""
    differ = 0
    for seed, (tp, pp, share) in enumerate(((8, 4, 0.3), (8, 8, 0.5), (16, 4, 0.4),
                                             (16, 8, 0.5))):
        topo, free = small_nvl(seed)
        m = tp // 4
        job = JobShape.from_nodes(int(len(free) * share) // (pp * m) * (pp * m), tp, pp, 4)
        racks = place(topo, free, job, weights=resolve(topo, 0.5, None, user={"leaf": 0.0}))
        leaves = place(topo, free, job, weights=resolve(topo, 0.5, None, user={"nvlink domain": 0}))
        assert racks.metrics == leaves.metrics  # the minipod tier is the MIP's either way
        even = {"leaf": TierWeight(0.5, 0.5), "nvlink domain": TierWeight(0.5, 0.5)}
        tiers = lower_tiers(topo)
        leaf_r, rack_r = lower_tier_score(racks.cells, even, tiers)
        leaf_l, rack_l = lower_tier_score(leaves.cells, even, tiers)
        assert rack_r <= rack_l and leaf_l <= leaf_r
        differ += (leaf_r, rack_r) != (leaf_l, rack_l)
    assert differ >= 2, "the weights should change where the cells go"


def test_an_arrangement_nowhere_worse_than_slurms_is_preferred() -> None:
    """The 10k-GPU, 70%-busy TP 8 x PP 4 case of `arnold bench placement --nvl`: by the
    weighted sum alone the arrangement touches one rack more per group than Slurm's block
    rule; one that is nowhere worse than it exists among those tried and is chosen."""
    rng = random.Random("0-nvl-10k-1")
    topo = nvl_cluster(10_000, rng)
    free = fragment(topo, 0.7, rng)
    job = JobShape.from_nodes(int(len(free) * 0.25) // 8 * 8, 8, 4, 4)
    plain = place(topo, free, job, lower_tiers=False)
    slurm_nodes = block_rule(topo, free, job.nodes, job.nodes_per_unit)
    assert slurm_nodes is not None
    slurm = cells_from_rank_order(slurm_nodes, job)
    pool = Pool.build(topo, free, job)
    weights = default_weights(topo, 0.5)
    tiers = lower_tiers(topo)
    theirs = lower_tier_score(slurm, weights, tiers)
    alone = lower_tier_score(arrange(plain.cells, pool, job, 0.5, weights), weights, tiers)
    assert any(a > b for a, b in zip(alone, theirs, strict=True))
    ours = lower_tier_score(arrange(plain.cells, pool, job, 0.5, weights, [slurm]), weights,
                            tiers)
    assert all(a <= b for a, b in zip(ours, theirs, strict=True))
    assert ours == lower_tier_score(place(topo, free, job).cells, weights, tiers)


def test_a_one_number_list_scales_as_the_number_does() -> None:
    """A job's spec keeps each --tier-weight as a list: [W] means W."""
    topo = parse_topology(TWO_TIERS, "two")
    assert resolve(topo, 0.5, None, user={"leaf": [3.0]}) == resolve(topo, 0.5, None,
                                                               user={"leaf": 3.0})
    with pytest.raises(ArnoldError):
        resolve(topo, 0.5, None, user={"leaf": [1.0, 2.0, 3.0]})


def test_a_jobs_spec_keeps_its_tier_weights_and_refuses_bad_ones(tmp_path: Path) -> None:
    import os
    from dataclasses import asdict

    from site_config import load_config
    from slurm_arnold.submit.spec import BadSpec, JobSpec, read_spec, spec_path

    config = load_config({"state_dir": str(tmp_path / "state"),
                          "jobs_dir": str(tmp_path / "jobs")})
    spec = JobSpec(7, "me", "0123abcd", 8, 2, 4, 8, 0.5, "mip", "tp-dp-pp",
                   tier_weights={"leaf": [2.0], "nvlink domain": [0.1, 0.9]})
    path = spec_path(config, "me", 7)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(asdict(spec)))
    path.chmod(0o644)
    assert read_spec(config, "me", os.getuid(), 7) == spec
    old = {k: v for k, v in asdict(spec).items() if k != "tier_weights"}
    path.write_text(json.dumps(old))
    read = read_spec(config, "me", os.getuid(), 7)
    assert read is not None and read.tier_weights == {}
    for bad in ({"leaf": 2}, {"leaf": [-1]}, {"leaf": [1, 2, 3]}, {"leaf": [True]},
                {"../x": [1]}, ["leaf"]):
        path.write_text(json.dumps(old | {"tier_weights": bad}))
        with pytest.raises(BadSpec, match="tier_weights"):
            read_spec(config, "me", os.getuid(), 7)


def test_a_rebinding_weighs_as_the_submit_did(tmp_path: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    """The admin side's rebinding takes the site's weights, then the job's own from its spec;
    where the job's name a tier the topology no longer has, the site's alone, with a warning."""
    from typing import Any, cast

    from reservations.binder import Binder
    from site_config import load_config
    from slurm_arnold.submit.spec import JobSpec

    config = load_config({"state_dir": str(tmp_path / "state"), "tier_weights": {"leaf": 3.0}})
    binder = Binder(config, cast(Any, None), cast(Any, None))
    topo, _ = small_nvl()
    spec = JobSpec(7, "me", "0123abcd", 8, 2, 4, 4, 0.5, "mip", "tp-dp-pp",
                   tier_weights={"nvlink domain": [0.0, 1.0]})
    weights = binder.weights(topo, spec)
    assert weights["leaf"] == TierWeight(1.5, 1.5)
    assert weights["nvlink domain"] == TierWeight(0.0, 1.0)
    stale = JobSpec(8, "me", "0123abcd", 8, 2, 4, 4, 0.5, "mip", "tp-dp-pp",
                    tier_weights={"rack": [1.0]})
    with caplog.at_level("WARNING"):
        weights = binder.weights(topo, stale)
    assert weights == resolve(topo, 0.5, None, site={"leaf": 3.0})
    assert "job 8: its --tier-weight no longer applies" in caplog.text
