"""The placement benchmark's --quick smoke run (the full suite is `arnold bench placement`)."""

from __future__ import annotations

import json
from pathlib import Path

import hostlist
import pytest
from click.testing import CliRunner

from slurm_arnold.cli.main import main
from slurm_arnold.slurm import Slurm


def test_quick_benchmark_runs_and_never_loses(tmp_path: Path) -> None:
    docs = tmp_path / "benchmarks.md"
    result = CliRunner().invoke(main, ["bench", "placement", "--quick", "--json", "--docs",
                                       str(docs)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output.strip().splitlines()[-1])
    summary = doc["summary"]
    assert summary["cases"] == len(doc["cases"]) > 0
    assert summary["never_worse_than_best_baseline"] is True
    assert summary["never_worse_than_pp_aligned"] is True
    for case in doc["cases"]:
        best = min(v for k, v in case["spreads"].items() if k not in ("mip", "pp-aligned"))
        assert case["ratio"] == round(best / case["spreads"]["mip"], 4)
    for case in doc["cases"]:
        assert set(case["budgets"]) == {"0.5", "default"}
        assert case["status"] in ("optimal", "gap")
        assert case["budgets"]["default"]["spread"] == case["spreads"]["mip"]
    for scale in summary["per_scale"].values():
        assert scale["wall_p95_s"] > 0  # a fresh `arnold place` process really ran
        assert scale["proven_or_gap_1pct"] <= scale["cases"]
    assert 0 <= summary["proven_share"] <= 1
    assert not docs.exists()  # --quick leaves the docs alone


def test_docs_section_is_replaced_not_duplicated(tmp_path: Path) -> None:
    from benchmarks.placement import write_section

    path = tmp_path / "b.md"
    write_section(path, "placement", "first")
    write_section(path, "other", "kept")
    write_section(path, "placement", "second")
    text = path.read_text()
    assert text.count("<!-- placement:start -->") == 1
    assert "second" in text and "first" not in text and "kept" in text


@pytest.mark.live
def test_live_quick_bench_reads_both_rank_orders_and_ours_never_loses(
        slurm: Slurm, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # On whichever lane runs the tests: two jobs, each run by arnold-sbatch and by plain
    # sbatch on the same state, their ranks read from the running tasks.
    monkeypatch.chdir(tmp_path)
    docs = tmp_path / "benchmarks.md"
    result = CliRunner().invoke(main, ["bench", "placement", "--live", "--quick", "--json",
                                       "--docs", str(docs)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output.strip().splitlines()[-1])
    version = slurm.version()
    assert doc["slurm_version"] == f"{version[0]}.{version[1]:02d}"
    assert len(doc["jobs"]) == 2
    for row in doc["jobs"]:
        for side in ("ours", "slurm"):
            assert len(hostlist.expand_hostlist(row[side]["nodes"])) == row["nodes"]
        assert row["ours"]["weighted_spread"] <= row["slurm"]["weighted_spread"]
    assert doc["ours_never_worse"] is True
    assert isinstance(doc["slurm_ranks_in_name_order"], bool)
    assert not docs.exists()
    left = [j for j in slurm.jobs(unfinished=True)
            if j.name == "wrap" or j.name.startswith(("ours-", "slurm-"))]
    assert not left, "the bench left jobs behind"


def test_nvl_quick_bench_keeps_tp_groups_in_racks_and_never_loses(tmp_path: Path) -> None:
    from benchmarks.placement_nvl import block_rule, nvl_cluster
    from slurm_arnold.placement import JobShape

    docs = tmp_path / "benchmarks.md"
    result = CliRunner().invoke(main, ["bench", "placement", "--nvl", "--quick", "--json",
                                       "--docs", str(docs)])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output.strip().splitlines()[-1])
    assert doc["cases"]
    for case in doc["cases"]:
        assert case["split_groups"]["mip"] == 0
        assert case["spreads"]["mip"] <= case["spreads"]["slurm-block"] + 1e-9
        assert case["split_groups"]["slurm-block"] == 0  # segments keep its groups whole
        ours, plain = case["per_tier"]["mip"], case["per_tier"]["mip-unarranged"]
        assert list(ours) == ["nvlink domain", "leaf", "minipod", "core"]
        assert ours["minipod"] == plain["minipod"] == case["spreads"]["mip"]
        assert ours["nvlink domain"] + ours["leaf"] <= plain["nvlink domain"] + plain["leaf"]
        # The summed objective: the spine tier at full weight, the racks and leaves at half.
        assert case["tier_objective"]["mip"] == pytest.approx(
            ours["minipod"] + ours["core"] + 0.5 * (ours["nvlink domain"] + ours["leaf"]))
    random_trees = doc["random_summary"]
    assert random_trees["cases"] == len(doc["random_trees"]) > 0
    assert random_trees["nowhere_worse_without_new_steps"] <= random_trees["nowhere_worse"]
    for tree in doc["random_trees"]:  # the bench checks the record against the rivals
        if tree["dominance"] is not None:
            assert tree["dominance"]["rival_tiers_worse_after"] == tree["rival_tiers_worse"]
    for scale in doc["summary"].values():
        assert scale["never_worse_than_valid_baselines"] is True
        assert 0 <= scale["tier_objective_cases_worse_than_block_rule"] <= scale["cases"]
    assert not docs.exists()
    # The modelled block rule: the tightest single rack when one holds the job.
    import random

    topo = nvl_cluster(4 * 18 * 8, random.Random(1))
    racks: dict[str, list[str]] = {}
    for node, rack in topo.domains.items():
        racks.setdefault(rack, []).append(node)
    names = list(racks)
    free = racks[names[0]][:10] + racks[names[1]][:6] + racks[names[2]]
    chosen = block_rule(topo, free, JobShape(tp=8, pp=1, dp=3, gpus_per_node=4))
    assert chosen is not None and set(chosen) <= set(racks[names[1]])
