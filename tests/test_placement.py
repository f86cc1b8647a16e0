"""Placement: validity of every algorithm, optimality against brute force, infeasible input."""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from site_config import NetworkTiers
from slurm_arnold.cli.main import main
from slurm_arnold.errors import InfeasibleError
from slurm_arnold.placement import OFFLINE_ALGOS, JobShape, place
from slurm_arnold.placement.align import alpha_from_model, auto_alpha, parse_bytes
from slurm_arnold.plan.catalog import MODELS
from slurm_arnold.topology import Topology, parse_topology


def tree(pods: list[list[int]]) -> Topology:
    """A fat tree: ``pods[p]`` lists the node counts of minipod p's leaves."""
    lines, node, leaf = [], 0, 0
    for p, leaves in enumerate(pods):
        first = leaf
        for count in leaves:
            lines.append(f"SwitchName=l{leaf} Nodes=" + ",".join(
                f"n{node + i:04d}" for i in range(count)))
            node += count
            leaf += 1
        lines.append(f"SwitchName=p{p} Switches=" + ",".join(f"l{i}" for i in range(first, leaf)))
    lines.append("SwitchName=c Switches=" + ",".join(f"p{p}" for p in range(len(pods))))
    return parse_topology("\n".join(lines))


def spreads_from_assignment(assignment: list[dict[str, object]], topo: Topology,
                            alpha: float) -> tuple[int, int, float]:
    """Recompute the spreads from the JSON assignment alone."""
    dp_groups: dict[int, set[str]] = {}
    pp_groups: dict[int, set[str]] = {}
    for e in assignment:
        pod = topo.minipod_of(str(e["node"]))
        dp_groups.setdefault(int(e["pp"]), set()).add(pod)  # type: ignore[call-overload]
        pp_groups.setdefault(int(e["dp"]), set()).add(pod)  # type: ignore[call-overload]
    a = max(len(s) for s in dp_groups.values())
    b = max(len(s) for s in pp_groups.values())
    return a, b, alpha * a + (1 - alpha) * b


def check_valid(result_json: dict[str, object], job: JobShape, topo: Topology,
                free: set[str], alpha: float) -> None:
    assignment = result_json["assignment"]
    assert isinstance(assignment, list)
    g = job.gpus_per_node
    # every node free; every GPU of every node used exactly once
    gpu_use: Counter[str] = Counter()
    for e in assignment:
        assert e["node"] in free
        first, end = e["tp"]
        gpu_use[e["node"]] += end - first if job.tp > g else job.tp
    assert all(v == g for v in gpu_use.values()), gpu_use
    assert len(gpu_use) == job.nodes
    # every (pp, dp) TP group complete exactly once
    ranks: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for e in assignment:
        ranks.setdefault((e["pp"], e["dp"]), []).append(tuple(e["tp"]))
    assert set(ranks) == {(p, d) for p in range(job.pp) for d in range(job.dp)}
    for slices in ranks.values():
        covered = sorted(slices)
        assert covered[0][0] == 0 and covered[-1][1] == job.tp
        assert all(a[1] == b[0] for a, b in itertools.pairwise(covered))
    # a TP group spanning nodes stays under one leaf (our own algorithms promise it)
    if result_json["algo"] == "mip" and job.tp > g:
        for (p, d) in ranks:
            leaves = {topo.leaf_of(e["node"]) for e in assignment if (e["pp"], e["dp"]) == (p, d)}
            assert len(leaves) == 1
    a, b, w = spreads_from_assignment(assignment, topo, alpha)
    metrics = result_json["metrics"]
    assert isinstance(metrics, dict)
    assert (metrics["max_dp_spread"], metrics["max_pp_spread"]) == (a, b)
    assert metrics["weighted_spread"] == pytest.approx(w)


FRAGMENTED = tree([[4, 3, 4], [2, 4], [4, 4, 1, 3], [3]])


@pytest.mark.parametrize("algo", OFFLINE_ALGOS)
@pytest.mark.parametrize(("tp", "pp", "dp", "g"), [(8, 4, 4, 8), (4, 2, 8, 8), (16, 2, 2, 8),
                                                    (8, 3, 5, 8), (2, 4, 4, 8)])
def test_every_algorithm_gives_a_valid_placement(algo: str, tp: int, pp: int, dp: int,
                                                 g: int) -> None:
    rng = random.Random(7)
    free = {n for n in FRAGMENTED.nodes if rng.random() < 0.85}
    job = JobShape(tp, pp, dp, g)
    result = place(FRAGMENTED, free, job, algo=algo, alpha=0.5, time_limit=5)
    check_valid(result.as_json(), job, FRAGMENTED, free, 0.5)


def brute_force(caps: list[int], pp: int, dp: int, alpha: float) -> float:
    cells = [(j, i) for j in range(pp) for i in range(dp)]
    best = float("inf")
    for choice in itertools.product(range(len(caps)), repeat=len(cells)):
        if any(choice.count(p) > c for p, c in enumerate(caps)):
            continue
        rows: dict[int, set[int]] = {}
        cols: dict[int, set[int]] = {}
        for (j, i), p in zip(cells, choice, strict=True):
            rows.setdefault(j, set()).add(p)
            cols.setdefault(i, set()).add(p)
        w = alpha * max(map(len, rows.values())) + (1 - alpha) * max(map(len, cols.values()))
        best = min(best, w)
    return best


@pytest.mark.parametrize("seed", range(12))
def test_mip_is_optimal_against_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    pp, dp = rng.choice([(2, 3), (3, 2), (2, 4), (3, 3), (1, 5), (4, 2)])
    caps = [rng.randint(1, 5) for _ in range(rng.randint(2, 4))]
    while sum(caps) < pp * dp:
        caps[rng.randrange(len(caps))] += 1
    topo = tree([[c] for c in caps])
    alpha = rng.choice([0.25, 0.5, 0.75])
    job = JobShape(8, pp, dp, 8)
    result = place(topo, topo.nodes, job, algo="mip", alpha=alpha, time_limit=10)
    assert result.metrics.weighted_spread == pytest.approx(brute_force(caps, pp, dp, alpha))
    assert result.gap == 0.0
    for algo in OFFLINE_ALGOS:  # never worse than any baseline
        other = place(topo, topo.nodes, job, algo=algo, alpha=alpha)
        assert result.metrics.weighted_spread <= other.metrics.weighted_spread + 1e-9


def test_mip_beats_blind_baselines_on_a_fragmented_tree() -> None:
    topo = tree([[8, 8], [8, 8], [8, 8], [8, 8]])
    rng = random.Random(3)
    free = [n for n in topo.nodes if rng.random() < 0.7]
    job = JobShape.from_nodes(32, 8, 4, 8)
    mip = place(topo, free, job, algo="mip", alpha=0.25, time_limit=10)
    best_baseline = min(place(topo, free, job, algo=a, alpha=0.25).metrics.weighted_spread
                        for a in OFFLINE_ALGOS if a != "mip")
    assert mip.metrics.weighted_spread < best_baseline
    assert mip.gap is not None and mip.gap <= 0.01


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [({"tp": 3, "pp": 2, "dp": 2, "gpus_per_node": 8}, "does not divide"),
     ({"tp": 12, "pp": 2, "dp": 2, "gpus_per_node": 8}, "not a multiple"),
     ({"tp": 4, "pp": 2, "dp": 3, "gpus_per_node": 8}, "DP must be a multiple of 2"),
     ({"tp": 0, "pp": 2, "dp": 3, "gpus_per_node": 8}, "--tp must be at least 1")],
)
def test_incompatible_shapes(kwargs: dict[str, int], needle: str) -> None:
    with pytest.raises(InfeasibleError, match=needle):
        JobShape(**kwargs)


def test_dp_from_nodes() -> None:
    assert JobShape.from_nodes(16, 8, 4, 8).dp == 4
    with pytest.raises(InfeasibleError, match="not a multiple of TP x PP"):
        JobShape.from_nodes(10, 8, 4, 8)


def test_too_few_free_nodes() -> None:
    with pytest.raises(InfeasibleError, match="needs 16 nodes"):
        place(FRAGMENTED, FRAGMENTED.nodes[:10], JobShape(8, 4, 4, 8), algo="mip")


def test_tp_groups_that_cannot_stay_in_a_leaf() -> None:
    topo = tree([[1, 1, 1, 1]])  # four leaves of one node: a TP16 group needs two in one leaf
    with pytest.raises(InfeasibleError, match="under one leaf"):
        place(topo, topo.nodes, JobShape(16, 1, 2, 8), algo="mip")


def test_cli_place_json_and_errors(tmp_path: Path, isolated_config: Path) -> None:
    topo_file = tmp_path / "t.conf"
    topo_file.write_text("SwitchName=a Nodes=x[1-4]\nSwitchName=b Nodes=x[5-8]\n"
                         "SwitchName=p0 Switches=a\nSwitchName=p1 Switches=b\n"
                         "SwitchName=c Switches=p[0-1]\n")
    free_file = tmp_path / "free"
    free_file.write_text("# free nodes\nx[1-3]\n\nx5\nx[6-8]  # trailing comment\n")
    runner = CliRunner()
    result = runner.invoke(main, ["place", "--topology", str(topo_file), "--free",
                                  str(free_file), "--gpus-per-node", "8", "--tp", "8",
                                  "--pp", "2", "--nodes", "6", "--alpha", "0.25", "--algo",
                                  "mip", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output)
    assert set(doc) == {"algo", "assignment", "metrics", "solve_seconds", "gap", "dual_bound",
                        "status", "proved_by", "open_box", "stopped", "per_tier", "found_by",
                        "tier_objective", "dominance"}
    assert doc["dominance"] is None  # no NVLink domains here (placement.dominate)
    assert {e["node"] for e in doc["assignment"]} <= {"x1", "x2", "x3", "x5", "x6", "x7", "x8"}
    assert doc["metrics"]["max_pp_spread"] == 1
    bad = runner.invoke(main, ["place", "--topology", str(topo_file), "--tp", "8", "--pp", "2",
                               "--nodes", "9", "--json"])
    assert bad.exit_code == 1
    assert "not a multiple" in bad.output or "needs" in bad.output
    usage = runner.invoke(main, ["place", "--topology", str(topo_file), "--pp", "2"])
    assert usage.exit_code == 2
    alpha = runner.invoke(main, ["place", "--topology", str(topo_file), "--tp", "8", "--pp",
                                 "2", "--dp", "2", "--alpha", "1.5"])
    assert alpha.exit_code == 1 and "outside [0, 1]" in alpha.output
    garbage = tmp_path / "garbage"
    garbage.write_text("x[1-\n")
    bad_free = runner.invoke(main, ["place", "--topology", str(topo_file), "--free",
                                    str(garbage), "--tp", "8", "--pp", "1", "--dp", "1"])
    assert bad_free.exit_code == 1 and f"{garbage}:1: bad hostlist" in bad_free.output


def test_auto_alpha_favours_pipelines_for_equal_volumes() -> None:
    net = NetworkTiers()
    alpha = auto_alpha(dp_bytes=1e9, pp_bytes=1e9, dp=8, microbatches=8, network=net)
    assert alpha == pytest.approx(0.17 / (0.17 + 0.70), abs=0.01)
    heavy_dp = auto_alpha(dp_bytes=50e9, pp_bytes=1e9, dp=8, microbatches=8, network=net)
    assert heavy_dp > 0.5
    with pytest.raises(InfeasibleError):
        auto_alpha(dp_bytes=0, pp_bytes=0, dp=8, microbatches=8, network=net)
    assert parse_bytes("2G") == 2e9 and parse_bytes("1GiB") == 2**30


def test_align_auto_weighs_the_planners_volumes(tmp_path: Path, isolated_config: Path) -> None:
    net = NetworkTiers()
    m = MODELS["gpt-7.5b"]  # 36 layers: 9 per stage
    params = (9 * m.layer_params() + m.embedding_params()) / 8
    dp_bytes = 2 * (2 - 1) / 2 * 2 * params  # ring all-reduce of bf16 gradients over DP 2
    pp_bytes = 2 * 32 * 2 * 2048 * 4096 / 8  # 32 micro-batches, an activation each way
    expected = auto_alpha(dp_bytes=dp_bytes, pp_bytes=pp_bytes, dp=2, microbatches=32,
                          network=net)
    got = alpha_from_model("gpt-7.5b", 64, tp=8, pp=4, dp=2, network=net)
    assert got == pytest.approx(expected, abs=1e-4)
    # Fewer, bigger micro-batches and more gradient per GPU weigh the DP spread more.
    assert alpha_from_model("gpt-7.5b", 8, tp=1, pp=4, dp=8, network=net) > got
    topo_file = tmp_path / "t.conf"
    topo_file.write_text("SwitchName=a Nodes=x[1-4]\nSwitchName=b Nodes=x[5-8]\n"
                         "SwitchName=c Switches=a,b\n")
    args = ["place", "--topology", str(topo_file), "--tp", "8", "--pp", "4", "--dp", "2",
            "--align", "auto", "--model", "gpt-7.5b"]
    usage = CliRunner().invoke(main, args)
    assert usage.exit_code == 2 and "--global-batch" in usage.output
    placed = CliRunner().invoke(main, [*args, "--global-batch", "64", "--json"])
    assert placed.exit_code == 0, placed.output
    assert json.loads(placed.output)["metrics"]["max_pp_spread"] == 1


def test_slurm_algo_refuses_an_offline_topology(tmp_path: Path) -> None:
    # --algo slurm asks the live cluster: with --topology it is a usage error (no cluster needed).
    conf = tmp_path / "topology.conf"
    conf.write_text("SwitchName=l0 Nodes=n[1-8]\nSwitchName=core Switches=l0\n")
    result = CliRunner().invoke(main, ["place", "--topology", str(conf), "--tp", "8", "--pp",
                                       "4", "--dp", "2", "--algo", "slurm"])
    assert result.exit_code == 2 and "--algo slurm asks the live cluster" in result.output
