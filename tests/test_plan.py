"""The planner's cost model and search (issue 9, first part)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from site_config.settings import NetworkTiers
from slurm_arnold.cli import main
from slurm_arnold.errors import InfeasibleError
from slurm_arnold.plan.catalog import GPUS, MODELS
from slurm_arnold.plan.cost import (
    EFFICIENCY,
    Layout,
    activation_bytes_per_layer,
    estimate,
    model_flops,
    state_bytes_per_gpu,
)
from slurm_arnold.plan.reference import CALIBRATION_ROWS, SELENE, fit_efficiency, read_table
from slurm_arnold.plan.search import search

TABLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "reference" / \
    "megatron-sc21-table1.csv"
A100 = GPUS["a100-80g"]


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


def test_parameter_counts_match_the_names() -> None:
    for name, billions in (("gpt-1.7b", 1.7), ("gpt-18.4b", 18.4), ("gpt-1008b", 1008),
                           ("llama2-7b", 6.7), ("llama3-70b", 70.6), ("mixtral-8x7b", 46.7)):
        assert MODELS[name].params() / 1e9 == pytest.approx(billions, rel=0.04), name


def test_activation_memory_by_hand() -> None:
    m = MODELS["gpt-7.5b"]  # s 2048, h 4096, a 32
    tp_sp = Layout(8, 1, 1, recompute="none")
    assert activation_bytes_per_layer(m, tp_sp) == 2048 * 4096 / 8 * (34 + 5 * 32 * 2048 / 4096)
    assert activation_bytes_per_layer(m, replace(tp_sp, recompute="selective")) \
        == 2048 * 4096 / 8 * 34
    assert activation_bytes_per_layer(m, replace(tp_sp, recompute="full")) == 2 * 2048 * 4096 / 8
    tp_only = replace(tp_sp, sequence_parallel=False)
    assert activation_bytes_per_layer(m, tp_only) == 2048 * 4096 * (10 + 24 / 8 + 80 / 8)


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


def test_published_layouts_within_15_percent_with_one_fitted_constant() -> None:
    rows = _table()
    cal = [r for r in rows if r.model.name in CALIBRATION_ROWS]
    assert fit_efficiency(cal, A100) == pytest.approx(EFFICIENCY["a100-80g"], abs=0.001)
    for r in rows:
        got = estimate(r.model, A100, SELENE, r.layout, r.global_batch).tflops_per_gpu
        assert abs(got / r.tflops_per_gpu - 1) <= 0.15, (r.model.name, got, r.tflops_per_gpu)


def test_the_planner_fits_and_is_never_slower_than_the_published_layout() -> None:
    for r in _table():
        plan = search(r.model, A100, SELENE, r.layout.gpus, r.global_batch)
        published = estimate(r.model, A100, SELENE, r.layout, r.global_batch)
        assert plan.estimate.fits and plan.estimate.memory_gib_per_gpu * 2**30 <= 80e9
        assert plan.estimate.step_seconds <= published.step_seconds + 1e-9, r.model.name


def test_a_model_that_cannot_fit_names_the_gpus_that_would() -> None:
    m = MODELS["llama3-405b"]
    with pytest.raises(InfeasibleError, match="the smallest job that fits has 96 GPUs"):
        search(m, GPUS["h100-80g"], SELENE, 16, 64)
    search(m, GPUS["h100-80g"], SELENE, 96, 64)  # and it does
    with pytest.raises(InfeasibleError):
        search(m, GPUS["h100-80g"], SELENE, 88, 64)


def test_plan_cli_keys(isolated_config: Path) -> None:
    keys = {"tp", "pp", "dp", "cp", "ep", "zero", "recompute", "micro_batch", "stages",
            "step_seconds", "tflops_per_gpu", "mfu", "memory_gib_per_gpu", "search_seconds",
            "alternatives"}
    found = CliRunner().invoke(main, ["plan", "--model", "gpt-7.5b", "--gpus", "128",
                                      "--global-batch", "512", "--gpu", "a100-80g", "--json"])
    assert found.exit_code == 0, found.output
    doc = json.loads(found.output)
    assert keys <= set(doc) and doc["alternatives"]
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
