"""The planner's cost model and search (issue 9, first part)."""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from site_config.settings import NetworkTiers
from slurm_arnold.cli.main import main
from slurm_arnold.errors import ArnoldError, InfeasibleError
from slurm_arnold.plan.catalog import GPUS, MODELS, ModelSpec
from slurm_arnold.plan.cost import (
    EFFICIENCY,
    ELEMENTWISE_TRAFFIC,
    Layout,
    activation_bytes_per_layer,
    block_times,
    elementwise_seconds,
    estimate,
    group_levels,
    layer_forward_flops,
    model_flops,
    pp_message_bytes,
    recompute_elementwise_seconds,
    stage_model,
    state_bytes_per_gpu,
)
from slurm_arnold.plan.nest import best_cut, brute_force_cut, recursion_cut
from slurm_arnold.plan.reference import (
    CALIBRATION_ROWS,
    FLASH_RUNS,
    KORTHIKANTI_RUNS,
    LLAMA_405B,
    SELENE,
    fit_efficiency,
    fit_h100_efficiency,
    fit_roofline,
    flash_run_estimate,
    korthikanti_evaluate,
    korthikanti_layouts,
    llama_405b_estimate,
    read_table,
    relative_error,
)
from slurm_arnold.plan.search import evaluate_best, search

TABLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "reference" / \
    "megatron-sc21-table1.csv"
A100 = GPUS["a100-80g"]
H100 = GPUS["h100-80g"]


def _table() -> list:  # type: ignore[type-arg]
    if not TABLE.exists():
        pytest.skip(f"no reference table at {TABLE}")
    return read_table(TABLE)


@pytest.mark.parametrize("name", ["gpt-1.7b", "gpt-145.6b", "gpt-1008b"])
def test_flops_are_the_papers_formula(name: str) -> None:
    m = MODELS[name]
    b, s, layers, h, v = 512, m.seq_len, m.layers, m.hidden, m.vocab
    paper = 96 * b * s * layers * h * h * (1 + s / (6 * h) + v / (16 * layers * h))
    assert model_flops(m, b, "full") == pytest.approx(paper, rel=1e-12)
    # Without recomputation: three passes of the layers, the logits as before.
    assert model_flops(m, b, "none") == pytest.approx(
        72 * b * s * layers * h * h * (1 + s / (6 * h)) + 6 * b * s * h * v, rel=1e-12)
    # FlashAttention without recomputation recomputes the scores once, as selective does.
    assert model_flops(m, b, "none", "flash") == pytest.approx(
        model_flops(m, b, "selective"), rel=1e-12)
    assert model_flops(m, b, "full", "flash") == model_flops(m, b, "full")


def test_parameter_counts_match_the_names() -> None:
    for name, billions in (("gpt-1.7b", 1.7), ("gpt-18.4b", 18.4), ("gpt-1008b", 1008),
                           ("llama2-7b", 6.7), ("llama3-70b", 70.6), ("mixtral-8x7b", 46.7)):
        assert MODELS[name].params() / 1e9 == pytest.approx(billions, rel=0.04), name


def test_activation_memory_by_hand() -> None:
    m = MODELS["gpt-7.5b"]  # s 2048, h 4096, a 32
    tp_sp = Layout(8, 1, 1, recompute="none", attention="eager")
    assert activation_bytes_per_layer(m, tp_sp) == 2048 * 4096 / 8 * (34 + 5 * 32 * 2048 / 4096)
    # FlashAttention never stores the scores: Korthikanti's 5as/h term is gone.
    assert activation_bytes_per_layer(m, replace(tp_sp, attention="flash")) \
        == 2048 * 4096 / 8 * 34
    assert activation_bytes_per_layer(m, replace(tp_sp, recompute="selective")) \
        == 2048 * 4096 / 8 * 34
    assert activation_bytes_per_layer(m, replace(tp_sp, recompute="full")) == 2 * 2048 * 4096 / 8
    tp_only = replace(tp_sp, sequence_parallel=False)
    assert activation_bytes_per_layer(m, tp_only) == 2048 * 4096 * (10 + 24 / 8 + 80 / 8)


def test_without_sequence_parallelism_norms_run_whole_and_boundaries_gather() -> None:
    m = MODELS["gpt-7.5b"]  # s 2048, h 4096, a 32
    sp = Layout(8, 2, 8, attention="eager")
    no = replace(sp, sequence_parallel=False)
    scores = 5 * 32 * 2048 / 4096
    # Korthikanti et al.: 10 of the 34 bytes per value (norms, dropouts, residuals) are not
    # split over TP without sequence parallelism; the rest and the scores are.
    assert elementwise_seconds(m, A100, no) / elementwise_seconds(m, A100, sp) \
        == pytest.approx((10 + (24 + scores) / 8) / ((34 + scores) / 8))
    one = Layout(1, 2, 64, attention="eager")
    assert elementwise_seconds(m, A100, one) \
        == elementwise_seconds(m, A100, replace(one, sequence_parallel=False))
    # A stage boundary carries each rank's 1/TP slice either way (SC'21's scatter/gather);
    # without sequence parallelism the receivers all-gather it over NVLink.
    message = 2 * 2048 * 4096 / 8
    assert pp_message_bytes(m, sp) == pp_message_bytes(m, no) == message
    nvlink_bytes_per_s, nvlink_latency = 2400e9 / 8, 2e-6
    gather = 7 * message / nvlink_bytes_per_s + 7 * nvlink_latency
    with_sp, without = (stage_model(m, A100, SELENE, lay, 512).boundary_seconds[0]
                        for lay in (sp, no))
    assert without - with_sp == pytest.approx(gather)


def test_evaluate_on_the_runs_stack_is_within_10_percent_of_every_row() -> None:
    # The rule, on the software the rows ran (2021: eager attention, no sequence
    # parallelism): --evaluate given only the model, GPUs, batch, TP and PP chooses the rest.
    for r in _table():
        bare = Layout(r.layout.tp, r.layout.pp, r.layout.dp, attention="eager",
                      sequence_parallel=False)
        lay, est, chosen = evaluate_best(r.model, A100, SELENE, bare, set(), r.global_batch)
        assert est.fits and set(chosen) == {"recompute", "micro_batch", "zero", "interleave",
                                            "order"}
        assert (lay.attention, lay.sequence_parallel) == ("eager", False)
        assert abs(est.tflops_per_gpu / r.tflops_per_gpu - 1) <= 0.10, (r.model.name, lay)


def test_zero_stages_shard_what_they_should() -> None:
    m = MODELS["gpt-1.7b"]
    params = m.layers * m.layer_params() + m.embedding_params()
    base = Layout(1, 1, 8)
    states = [state_bytes_per_gpu(m, replace(base, zero=z)) for z in range(4)]
    assert states[0] == 16 * params
    assert states[1] == pytest.approx((4 + 12 / 8) * params)
    assert states[2] == pytest.approx((2 + 14 / 8) * params)
    assert states[3] == pytest.approx(16 / 8 * params)


def test_more_bandwidth_is_never_slower() -> None:
    m = MODELS["gpt-39.1b"]
    slow = SELENE
    fast = NetworkTiers(**{name: tier.model_copy(update={"bandwidth_gbps": tier.bandwidth_gbps
                                                         * 4})
                           for name, tier in SELENE})
    for layout in (Layout(8, 2, 32), Layout(4, 4, 32, zero=3), Layout(2, 8, 32, interleave=2)):
        assert estimate(m, A100, fast, layout, 1536).step_seconds \
            <= estimate(m, A100, slow, layout, 1536).step_seconds


def test_published_layouts_within_10_percent_fitted_on_half_checked_on_the_rest() -> None:
    rows = _table()
    cal = [r for r in rows if r.model.name in CALIBRATION_ROWS]
    assert 0 < len(cal) < len(rows)
    eff, traffic, worst = fit_roofline(cal, A100)
    assert eff == pytest.approx(EFFICIENCY["a100-80g"], abs=0.001)
    assert traffic == ELEMENTWISE_TRAFFIC
    for r in rows:  # the rows not fitted on are the check
        got = estimate(r.model, A100, SELENE, r.layout, r.global_batch).tflops_per_gpu
        assert abs(got / r.tflops_per_gpu - 1) <= 0.10, (r.model.name, got, r.tflops_per_gpu)
    # Without the memory-bound part one constant cannot do it: the small models' error grows.
    flat = fit_efficiency(cal, A100, traffic=0.0)
    errors = [relative_error(r, A100, flat, 0.0) for r in rows]
    assert max(abs(e) for e in errors) > worst


def test_h100_efficiency_is_refit_on_its_one_figure() -> None:
    assert fit_h100_efficiency() == pytest.approx(EFFICIENCY["h100-80g"], abs=0.001)
    _, est = llama_405b_estimate()
    assert est.tflops_per_gpu == pytest.approx(LLAMA_405B["published_tflops"], rel=0.01)


def test_published_flashattention_runs_are_checked_within_15_percent() -> None:
    # The default attention, on runs made with it and fitted on by nothing (15%: the issue's
    # rule for published runs the project does not have). Eager attention on the same runs
    # is further off: the check tells the two kernels apart.
    for run in FLASH_RUNS:
        lay, est = flash_run_estimate(run)
        assert (lay.tp, lay.pp, lay.attention) == (1, 1, "flash") and est.fits
        tokens = run["batch"] * run["model"].seq_len / est.step_seconds
        assert abs(tokens / run["tokens_per_s"] - 1) <= 0.15, (run["model"].name, tokens)
        eager = estimate(run["model"], A100, SELENE, replace(lay, attention="eager"),
                         run["batch"])
        eager_tokens = run["batch"] * run["model"].seq_len / eager.step_seconds
        assert abs(eager_tokens / run["tokens_per_s"] - 1) > abs(tokens / run["tokens_per_s"]
                                                                - 1)


def test_selective_recomputation_redoes_the_eager_softmax_traffic() -> None:
    m = MODELS["gpt-7.5b"]  # s 2048, h 4096, a 32: 5as/h = 80
    sel = Layout(8, 1, 16, recompute="selective", attention="eager")
    full_pass = elementwise_seconds(m, A100, sel)
    assert recompute_elementwise_seconds(m, A100, sel) == pytest.approx(full_pass * 80 / 114)
    for other in (replace(sel, attention="flash"), replace(sel, recompute="none"),
                  replace(sel, recompute="full")):
        assert recompute_elementwise_seconds(m, A100, other) == 0.0
    # It is in the layer's time: one layer of selective costs its extra FLOPs and traffic.
    none = replace(sel, recompute="none")
    sm_sel, sm_none = (stage_model(m, A100, SELENE, lay, 512) for lay in (sel, none))
    _, scores, _ = layer_forward_flops(m, 1)
    extra_flops = scores / 8 / (EFFICIENCY["a100-80g"] * A100.peak_flops)
    assert sm_sel.layer_seconds - sm_none.layer_seconds == pytest.approx(
        extra_flops + recompute_elementwise_seconds(m, A100, sel))


def test_megatron_2022_runs_are_checked_within_15_percent() -> None:
    # Korthikanti et al.'s runs, fitted on by nothing (15%: the issue's rule for published
    # runs the project does not have), each as it ran; sequence parallelism with selective
    # recomputation is the faster of the two, as the paper found (29-32% more throughput).
    for run in KORTHIKANTI_RUNS:
        full, present = korthikanti_layouts(run)
        new = estimate(run["model"], A100, SELENE, present, run["batch"])
        assert new.fits
        assert abs(run["present_s"] / new.step_seconds - 1) <= 0.15, run["model"].name
        if run["full_s"] is not None:
            old = estimate(run["model"], A100, SELENE, full, run["batch"])
            assert abs(run["full_s"] / old.step_seconds - 1) <= 0.15, run["model"].name
            assert old.step_seconds > new.step_seconds
        lay, est = korthikanti_evaluate(run)
        assert est.fits and (lay.attention, lay.sequence_parallel) == ("eager", True)
        assert est.step_seconds <= new.step_seconds * (1 + 1e-9)  # the best that fits


def test_megatron_2022_memory_claims() -> None:
    # Korthikanti et al. 6.1: none of the four models fits in 80 GB without both sequence
    # parallelism and selective recomputation. The cost model agrees except that it counts the
    # 22B with selective recomputation and no SP just under 80 GB (docs/benchmarks.md says so).
    for run in KORTHIKANTI_RUNS:
        _, both = korthikanti_layouts(run)
        for lay in (both, replace(both, recompute="none"),
                    replace(both, sequence_parallel=False),
                    replace(both, recompute="none", sequence_parallel=False)):
            if run["model"].name == "gpt-22b" and lay.recompute == "selective" \
                    and not lay.sequence_parallel:
                continue
            fits = estimate(run["model"], A100, SELENE, lay, run["batch"]).fits
            assert fits == (lay == both), (run["model"].name, lay)


def test_mosaicml_h100_runs_say_what_the_catalogue_figure_assumes() -> None:
    # The H100 figure is Meta's stack's: MosaicML's (PyTorch FSDP) runs are slower, so the
    # efficiency fitted on their short rows is below it, and fits those rows better.
    from slurm_arnold.plan.reference import (
        MOSAIC_FIT_SEQ,
        MOSAIC_H100_RUNS,
        fit_mosaic_efficiency,
        mosaic_tokens_per_gpu,
    )

    stack = fit_mosaic_efficiency()
    assert stack < EFFICIENCY["h100-80g"]
    short = [r for r in MOSAIC_H100_RUNS if r[1] <= MOSAIC_FIT_SEQ]
    long = [r for r in MOSAIC_H100_RUNS if r[1] > MOSAIC_FIT_SEQ]
    assert short and long
    assert all(mosaic_tokens_per_gpu(r) > r[5] for r in MOSAIC_H100_RUNS)

    def errors(rows: list[tuple[str, int, int, int, bool, float]], eff: float | None
               ) -> list[float]:
        return [mosaic_tokens_per_gpu(r, eff) / r[5] - 1 for r in rows]

    assert max(map(abs, errors(short, stack))) < max(map(abs, errors(short, None)))
    # Longer sequences are more attention: the calibrated model stays optimistic there.
    assert sum(errors(long, stack)) / len(long) > sum(errors(short, stack)) / len(short)


def test_the_planner_fits_and_is_never_slower_than_the_published_layout() -> None:
    for r in _table():
        plan = search(r.model, A100, SELENE, r.layout.gpus, r.global_batch)
        published = estimate(r.model, A100, SELENE, r.layout, r.global_batch)
        assert plan.estimate.fits and plan.estimate.memory_gib_per_gpu * 2**30 <= 80e9
        assert plan.estimate.step_seconds <= published.step_seconds + 1e-9, r.model.name


def test_a_model_that_cannot_fit_names_the_gpus_that_would() -> None:
    m = MODELS["llama3-405b"]
    with pytest.raises(InfeasibleError, match=r"the smallest job that fits has (\d+) GPUs") as err:
        search(m, GPUS["h100-80g"], SELENE, 16, 64)
    need = int(re.search(r"has (\d+) GPUs", str(err.value)).group(1))  # type: ignore[union-attr]
    # The states alone (16 bytes per parameter, ZeRO-3) need 81 GPUs of 80 GB; with activations
    # and the embeddings on the end stages, 88 (11 unequal stages).
    assert need == 88
    plan = search(m, GPUS["h100-80g"], SELENE, need, 64)  # and it does
    assert plan.estimate.fits and plan.layout.gpus == need
    with pytest.raises(InfeasibleError):
        search(m, GPUS["h100-80g"], SELENE, need - 8, 64)


def test_plan_cli_keys(isolated_config: Path) -> None:
    keys = {"tp", "pp", "dp", "cp", "ep", "zero", "recompute", "micro_batch", "stages",
            "step_seconds", "tflops_per_gpu", "mfu", "memory_gib_per_gpu", "search_seconds",
            "alternatives"}
    found = CliRunner().invoke(main, ["plan", "--model", "gpt-7.5b", "--gpus", "128",
                                      "--global-batch", "512", "--gpu", "a100-80g", "--json"])
    assert found.exit_code == 0, found.output
    doc = json.loads(found.output)
    assert keys <= set(doc) and doc["alternatives"]
    # Without --topology: the live cluster's leaves when Slurm answers (make test), else 32.
    assert (doc["leaf_nodes_from"], doc["leaf_nodes"] == 32) in {("live cluster", False),
                                                                 ("live cluster", True),
                                                                 ("default", True)}
    assert doc["tp"] * doc["pp"] * doc["dp"] == 128 and len(doc["stages"]) == doc["pp"]
    priced = CliRunner().invoke(main, ["plan", "--evaluate", "--model", "gpt-7.5b", "--gpus",
                                       "128", "--global-batch", "512", "--tp", "4", "--pp",
                                       "1", "--gpu", "a100-80g", "--json"])
    assert priced.exit_code == 0, priced.output
    assert keys <= set(json.loads(priced.output))
    assert json.loads(priced.output)["step_seconds"] >= doc["step_seconds"]
    bad = CliRunner().invoke(main, ["plan", "--model", "gpt-9b", "--gpus", "8",
                                    "--global-batch", "8"])
    assert bad.exit_code == 1 and "unknown model 'gpt-9b'" in bad.output


def test_bench_plan_quick(isolated_config: Path) -> None:
    if not TABLE.exists():
        pytest.skip(f"no reference table at {TABLE}")
    out = CliRunner().invoke(main, ["bench", "plan", "--quick", "--reference", str(TABLE),
                                    "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert len(doc["table1"]) == 10 and len(doc["speed"]) == 2
    assert all(abs(r["error"]) <= 0.15 for r in doc["table1"])
    assert [f["model"] for f in doc["flash_runs"]] == [r["model"].name for r in FLASH_RUNS]
    nest_dir = TABLE.parent / "nest"
    if nest_dir.is_dir():
        assert doc["nest"], "the shared NEST instance was not compared"
        for row in doc["nest"]:
            assert row["ours"]["finalTimePerBatch"] <= row["nest"]["finalTimePerBatch"]
            assert row["nest"]["priced_by_us"] == row["nest"]["finalTimePerBatch"]


# NEST's dynamic program (slurm_arnold/plan/nest.py)

SMALL = ModelSpec("small", 10, 1024, 16, 4096, 51200, 2048)


@pytest.mark.parametrize("pp,order,limit_gib", [(2, "tp-dp-pp", 80), (3, "tp-pp-dp", 80),
                                                (4, "tp-dp-pp", 6), (5, "tp-pp-dp", 5),
                                                (4, "tp-pp-dp", 3.2)])
def test_the_cut_is_the_brute_force_optimum(pp: int, order: str, limit_gib: float) -> None:
    lay = Layout(2, pp, 4, micro_batch=2, zero=0, recompute="none", order=order)
    sm = stage_model(SMALL, A100, SELENE, lay, 64, gpus_per_node=4, leaf_nodes=2)
    limit = limit_gib * 2**30
    value, cut = best_cut(sm, SMALL.layers, limit)
    expected, some_cut = brute_force_cut(sm, SMALL.layers, limit)
    assert value == pytest.approx(expected, rel=1e-12)
    if not some_cut:
        assert not cut  # nothing fits: neither finds a cut
        return
    assert sum(cut) == SMALL.layers and len(cut) == pp and min(cut) >= 1
    assert max(sm.slot(k, n) for k, n in enumerate(cut)) == pytest.approx(value, rel=1e-12)
    assert all(sm.memory(k, n) <= limit for k, n in enumerate(cut))
    # The estimate of the layout with that cut is the pipeline the program minimised.
    est = estimate(SMALL, A100, SELENE, replace(lay, stages=cut), 64, gpus_per_node=4,
                   leaf_nodes=2)
    assert est.step_seconds - est.dp_seconds == pytest.approx(
        (sm.microbatches - 1) * value + sum(sm.slot(k, n) for k, n in enumerate(cut)))


@pytest.mark.parametrize("recompute", ["none", "selective", "full"])
def test_block_times_add_up_to_the_stage_slots(recompute: str) -> None:
    m = MODELS["gpt-7.5b"]
    lay = Layout(4, 4, 2, micro_batch=2, recompute=recompute, stages=(10, 9, 9, 8))
    times = block_times(m, A100, SELENE, lay, 64)
    sm = stage_model(m, A100, SELENE, lay, 64)
    for k, n in enumerate(lay.stages):
        sends = sm.slot(k, 0) - (sm.logits_seconds if k == 3 else 0.0)
        assert times["tf"][k] + times["tb"][k] + times["tw"][k] == pytest.approx(
            sm.slot(k, n) - sends)
    assert times["microbatches"] == 64 // (2 * 2)
    assert times["message_bytes"] == 2 * 2 * 2048 * 4096 / 4
    # B carries the scores' gradients and any recomputation; W is the weight matmuls alone.
    assert times["tb"][0] > times["tf"][0] > times["tw"][0]


def test_the_threshold_search_gives_the_recursions_cut() -> None:
    # best_cut finds NEST's recursion's answer another way; on every template of a deep model
    # (pipelines of 2 to 80 stages, memory from tight to ample) both give the same cut.
    m = MODELS["llama3-70b"]
    compared = infeasible = 0
    for tp, pp, mb, recompute in itertools.product((2, 8), (2, 5, 16, 40, 80), (1, 2),
                                                   ("none", "full")):
        sm = stage_model(m, H100, SELENE, Layout(tp, pp, 4, micro_batch=mb,
                                                 recompute=recompute), 1024)
        for limit in (12e9, 40e9, 80e9, math.inf):
            fast, slow = best_cut(sm, m.layers, limit), recursion_cut(sm, m.layers, limit)
            assert fast == slow, (tp, pp, mb, recompute, limit)
            compared += 1
            infeasible += not fast[1]
    assert compared == 160 and 0 < infeasible < compared


def test_an_infeasible_memory_limit_has_no_cut() -> None:
    sm = stage_model(SMALL, A100, SELENE, Layout(1, 2, 1, zero=0, recompute="none"), 8)
    assert best_cut(sm, SMALL.layers, 1e6) == (float("inf"), ())
    assert brute_force_cut(sm, SMALL.layers, 1e6)[1] == ()


def test_the_output_layer_takes_layers_off_the_last_stage() -> None:
    # A Llama-3-8B shape: its 128k-word output layer costs about two transformer layers.
    m = ModelSpec("llama3-8b", 32, 4096, 32, 14336, 128256, 8192, kv_heads=8, gated_ffn=True)
    lay = Layout(8, 4, 4, zero=1, recompute="full")
    equal = estimate(m, A100, SELENE, lay, 256)
    sm = stage_model(m, A100, SELENE, lay, 256)
    _, cut = best_cut(sm, m.layers, A100.memory_bytes)
    assert cut[-1] < m.layers // 4
    assert estimate(m, A100, SELENE, replace(lay, stages=cut), 256).step_seconds \
        < equal.step_seconds


def test_the_rank_order_decides_which_boundaries_cross_nodes() -> None:
    # 8 GPUs per node, 4 nodes per leaf (32 GPUs); TP 4, PP 4, DP 2.
    dp_level, bounds = group_levels("tp-dp-pp", 4, 1, 4, 2, 8, 4)
    assert dp_level == 0 and bounds == (1, 1, 1)  # a stage per node: every boundary leaves it
    dp_level, bounds = group_levels("tp-pp-dp", 4, 1, 4, 2, 8, 4)
    assert dp_level == 1 and bounds == (0, 1, 0)  # two stages per node: one boundary in three


def test_pruning_keeps_the_exact_winner() -> None:
    for name, gpus, batch in (("gpt-39.1b", 512, 1536), ("mixtral-8x7b", 64, 256),
                              ("llama3-70b", 256, 512)):
        pruned = search(MODELS[name], A100, SELENE, gpus, batch)
        full = search(MODELS[name], A100, SELENE, gpus, batch, top=10**9)
        assert full.pruned == 0 and pruned.pruned > 0
        assert pruned.estimate.step_seconds == full.estimate.step_seconds
        assert pruned.layout == full.layout


def test_plan_reads_the_leaf_size_from_a_topology_file(tmp_path: Path,
                                                       isolated_config: Path) -> None:
    topo = tmp_path / "topology.conf"
    topo.write_text("SwitchName=l0 Nodes=n[1-2]\nSwitchName=l1 Nodes=n[3-4]\n"
                    "SwitchName=core Switches=l[0-1]\n")
    out = CliRunner().invoke(main, ["plan", "--model", "gpt-7.5b", "--gpus", "32",
                                    "--global-batch", "64", "--topology", str(topo), "--json"])
    assert out.exit_code == 0, out.output
    doc = json.loads(out.output)
    assert (doc["leaf_nodes"], doc["leaf_nodes_from"]) == (2, "topology file")


def test_plan_explain_says_where_the_time_goes(isolated_config: Path) -> None:
    out = CliRunner().invoke(main, ["plan", "--model", "gpt-7.5b", "--gpus", "64",
                                    "--global-batch", "256", "--gpu", "a100-80g", "--explain"])
    assert out.exit_code == 0, out.output
    shares = re.findall(r"\((\d+)%\)", out.output)
    assert "pipeline bubble" in out.output and "nodes per leaf" in out.output
    assert 95 <= sum(map(int, shares)) <= 105  # the parts add up to the step (rounding)


def test_evaluate_takes_a_cut(isolated_config: Path) -> None:
    args = ["plan", "--evaluate", "--model", "gpt-39.1b", "--gpus", "512", "--global-batch",
            "1536", "--gpu", "a100-80g", "--tp", "8", "--pp", "4", "--json"]
    even = CliRunner().invoke(main, args)
    cut = CliRunner().invoke(main, [*args, "--stages", "13,12,12,11"])
    assert even.exit_code == 0 and cut.exit_code == 0, cut.output
    assert json.loads(cut.output)["stages"] == [[0, 12], [13, 24], [25, 36], [37, 47]]
    assert json.loads(even.output)["stages"][0] == [0, 11]
    bad = CliRunner().invoke(main, [*args, "--stages", "12,12,12"])
    assert bad.exit_code == 1 and "adding up to 48" in bad.output


def test_model_and_gpu_files_are_checked_key_by_key(tmp_path: Path) -> None:
    from dataclasses import asdict, fields

    from slurm_arnold.errors import ArnoldError
    from slurm_arnold.plan.catalog import (
        GPUS,
        GpuSpec,
        ModelSpec,
        _gpu_file,
        _model_file,
        load_gpu,
        load_model,
    )

    # One list of keys: the file schemas are the dataclasses' fields.
    assert set(_model_file().model_fields) == {f.name for f in fields(ModelSpec)} - {"name"}
    assert set(_gpu_file().model_fields) == {f.name for f in fields(GpuSpec)} - {"name"}
    good = ("layers = 32\nhidden = 4096\nheads = 32\nffn_hidden = 11008\nvocab = 32000\n"
            "seq_len = 4096\ngated_ffn = true\n")
    path = tmp_path / "llama2-7b.toml"
    path.write_text(good)
    assert load_model(str(path)) == MODELS["llama2-7b"]
    for text, message in [
        (good.replace("heads = 32", "heads = 0"), "heads: Input should be greater than 0"),
        (good.replace("heads = 32", 'heads = "32"'), "heads: Input should be a valid integer"),
        (good.replace("heads = 32", "heads = 48"), "heads \\(48\\) must divide hidden"),
        (good.replace("layers = 32", "layers = 3.5"), "layers: Input should be a valid integer"),
        (good + "kv_heads = 5\n", "kv_heads \\(5\\) must divide heads"),
        (good + "experts = 2\ntop_k = 3\n", "top_k \\(3\\) exceeds experts"),
        (good + "colour = 1\n", "colour: Extra inputs are not permitted"),
        (good.replace("vocab = 32000\n", ""), "vocab: Field required"),
        ("layers = [", "cannot read it as TOML"),
    ]:
        path.write_text(text)
        with pytest.raises(ArnoldError, match=message):
            load_model(str(path))
    gpu = tmp_path / "x.toml"
    gpu.write_text("peak_flops = 989e12\nmemory_bytes = 80e9\nnvlink_bytes_per_s = 450e9\n"
                   "hbm_bytes_per_s = 3.35e12\n")
    assert asdict(load_gpu(str(gpu))) == asdict(GPUS["h100-80g"]) | {"name": "x"}
    # HBM bandwidth may be left out (2 TB/s, an A100's, is assumed).
    gpu.write_text("peak_flops = 989e12\nmemory_bytes = 80e9\nnvlink_bytes_per_s = 450e9\n")
    assert load_gpu(str(gpu)).hbm_bytes_per_s == 2.0e12
    for text, message in [
        ("peak_flops = nan\nmemory_bytes = 80e9\nnvlink_bytes_per_s = 1e9\n", "peak_flops"),
        ("peak_flops = inf\nmemory_bytes = 80e9\nnvlink_bytes_per_s = 1e9\n", "peak_flops"),
        ("peak_flops = 1e12\nmemory_bytes = -1\nnvlink_bytes_per_s = 1e9\n", "memory_bytes"),
        ('peak_flops = "fast"\nmemory_bytes = 1\nnvlink_bytes_per_s = 1e9\n', "peak_flops"),
        ("peak_flops = 1e12\nmemory_bytes = 1\nnvlink_bytes_per_s = 1e9\nefficiency = 1.5\n",
         "efficiency: Input should be less than or equal to 1"),
        ("peak_flops = 1e12\nmemory_bytes = 1\nnvlink_bytes_per_s = 1e9\nefficiency = 0\n",
         "efficiency: Input should be greater than 0"),
    ]:
        gpu.write_text(text)
        with pytest.raises(ArnoldError, match=message):
            load_gpu(str(gpu))
    # A site's measured stack: its GPU file's efficiency replaces the catalogue's figure.
    gpu.write_text("peak_flops = 989e12\nmemory_bytes = 80e9\nnvlink_bytes_per_s = 450e9\n"
                   "hbm_bytes_per_s = 3.35e12\nefficiency = 0.5\n")
    from slurm_arnold.plan.reference import H100_CLUSTER

    layout, model = Layout(8, 2, 4), MODELS["llama2-7b"]
    mine = estimate(model, load_gpu(str(gpu)), H100_CLUSTER, layout, 64)
    assert mine.step_seconds == estimate(model, GPUS["h100-80g"], H100_CLUSTER, layout, 64,
                                         efficiency=0.5).step_seconds
    assert mine.step_seconds > estimate(model, GPUS["h100-80g"], H100_CLUSTER, layout,
                                        64).step_seconds
    gpu.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(ArnoldError, match="cannot read it as TOML"):
        load_gpu(str(gpu))


def test_evaluate_cuts_uneven_pp_and_chooses_what_is_not_given(isolated_config: Path) -> None:
    args = ["plan", "--evaluate", "--model", "llama3-405b", "--gpus", "8192", "--global-batch",
            "2048", "--tp", "8", "--pp", "16", "--gpu", "h100-80g", "--seq", "8192", "--json"]
    doc = json.loads(CliRunner().invoke(main, args).output)
    sizes = [b - a + 1 for a, b in doc["stages"]]
    assert len(sizes) == 16 and sum(sizes) == 126  # 16 stages do not divide 126 layers
    assert doc["cut"] == "dynamic program" and "stages" in doc["chosen"]
    assert set(doc["chosen"]) >= {"recompute", "micro_batch", "zero", "interleave", "order"}
    assert doc["fits"] and doc["attention"] == "flash"
    # What the user gives stays given; interleaving with unequal stages is priced.
    fixed = json.loads(CliRunner().invoke(main, [*args, "--recompute", "full", "--interleave",
                                                 "2"]).output)
    assert (fixed["recompute"], fixed["interleave"]) == ("full", 2)
    assert "recompute" not in fixed["chosen"] and "interleave" not in fixed["chosen"]
    assert fixed["step_seconds"] >= doc["step_seconds"]
    # Without FlashAttention and without recomputation it does not fit (the old formula).
    eager = json.loads(CliRunner().invoke(main, [*args, "--recompute", "none", "--attention",
                                                 "eager"]).output)
    assert not eager["fits"] and eager["memory_gib_per_gpu"] > 5 * doc["memory_gib_per_gpu"]


def test_plan_searches_on_the_stack_it_is_given(isolated_config: Path) -> None:
    args = ["plan", "--model", "gpt-7.5b", "--gpus", "128", "--global-batch", "512",
            "--gpu", "a100-80g", "--json"]
    default = json.loads(CliRunner().invoke(main, args).output)
    assert (default["attention"], default["sequence_parallel"]) == ("flash", True)
    result = CliRunner().invoke(main, [*args, "--attention", "eager", "--no-sequence-parallel"])
    old = json.loads(result.output)
    assert (old["attention"], old["sequence_parallel"]) == ("eager", False)
    assert all((a["attention"], a["sequence_parallel"]) == ("eager", False)
               for a in old["alternatives"])
    assert old["step_seconds"] > default["step_seconds"]
    text = CliRunner().invoke(main, [*args[:-1], "--attention", "eager",
                                     "--no-sequence-parallel"])
    assert "eager attention, no sequence parallelism" in text.output


def test_uneven_interleaved_chunks_cost_the_largest_chunk() -> None:
    from slurm_arnold.plan.catalog import GPUS
    from slurm_arnold.plan.cost import estimate
    from slurm_arnold.plan.reference import SELENE

    m = MODELS["gpt-39.1b"]  # 48 layers
    even = Layout(8, 4, 16, recompute="full", interleave=2)
    uneven = replace(even, stages=(13, 12, 12, 11))
    e, u = (estimate(m, GPUS["a100-80g"], SELENE, lay, 1536) for lay in (even, uneven))
    assert e.bubble_seconds > 0 and u.step_seconds > e.step_seconds  # 13 layers: chunks 7+6
    with pytest.raises(ArnoldError, match="does not split into 4 chunks"):
        estimate(m, GPUS["a100-80g"], SELENE, replace(even, stages=(3, 15, 15, 15),
                                                      interleave=4), 1536)
