"""Megatron-LM SC'21 Table 1 as test data for the cost model, and the A100 calibration; the
H100 figure; published FlashAttention runs that check the default attention.

Selene (the paper's machine): DGX A100 nodes, NVLink 3 (300 GB/s per GPU and direction), one
200 Gb/s HDR InfiniBand adapter per GPU, a non-blocking fat tree.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from site_config.settings import LinkTier, NetworkTiers
from slurm_arnold.plan.catalog import MODELS, GpuSpec, ModelSpec
from slurm_arnold.plan.cost import Layout, estimate

SELENE = NetworkTiers(nvlink=LinkTier(bandwidth_gbps=2400.0, latency_us=2.0),
                      leaf=LinkTier(bandwidth_gbps=200.0, latency_us=5.0),
                      minipod=LinkTier(bandwidth_gbps=200.0, latency_us=8.0),
                      core=LinkTier(bandwidth_gbps=200.0, latency_us=12.0))
#: An H100 cluster of today (the site defaults: NVLink 4, one 400 Gb/s link per GPU, the core
#: 2:1 oversubscribed), for the H100 figure: Meta's Llama 3 fabric is RoCE at 400 Gb/s per GPU.
H100_CLUSTER = NetworkTiers()
#: Llama 3 405B as Meta trained it (Llama 3 paper: 8,192 H100s, TP 8, CP 1, PP 16, DP 64,
#: sequence 8,192, global batch 2,048 sequences; 430 TFLOP/s per GPU): the H100 efficiency's one
#: data point, priced as ``arnold plan --evaluate`` prices it given TP and PP only.
LLAMA_405B: dict[str, float] = {"gpus": 8192, "batch": 2048, "seq": 8192, "tp": 8, "pp": 16,
                                "published_tflops": 430.0}

#: Published runs with FlashAttention, to check the default attention against: the
#: flash-attention repository's ``training/README.md`` ("Training speed"; Dao-AILab/flash-attention
#: at 0b037c2d): one node of 8 x A100 80GB SXM4 (400 W) with NVLink, GPT-3 1.3B and 2.7B (head
#: dimension 128, "gpt3-2.7B-flash-hdim128"), sequence 2,048, batches of 1M tokens (512
#: sequences), vocabulary padded to a multiple of 8, no activation checkpointing; throughput
#: in tokens per second as published. Neither enters any fit.
FLASH_RUNS: tuple[dict[str, Any], ...] = (
    {"model": ModelSpec("gpt3-1.3b", 24, 2048, 16, 4 * 2048, 50264, 2048), "gpus": 8,
     "batch": 512, "tokens_per_s": 169_000.0},
    {"model": ModelSpec("gpt3-2.7b-hdim128", 32, 2560, 20, 4 * 2560, 50264, 2048), "gpus": 8,
     "batch": 512, "tokens_per_s": 85_000.0},
)

#: The rows the A100 efficiency and the elementwise traffic are fitted on: the even rows
#: (every other model from the smallest); the odd rows check them.
CALIBRATION_ROWS = ("gpt-1.7b", "gpt-7.5b", "gpt-39.1b", "gpt-145.6b", "gpt-529.6b")


@dataclass(frozen=True)
class PublishedRow:
    """One row of Table 1: the model, its published layout and throughput."""

    model: ModelSpec
    layout: Layout
    global_batch: int
    tflops_per_gpu: float


def read_table(path: Path) -> list[PublishedRow]:
    """The rows of ``megatron-sc21-table1.csv`` matched to the catalogue's GPT models (micro-
    batch 1, full recomputation, no ZeRO, eager attention: the paper predates FlashAttention)."""
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    by_shape = {(m.layers, m.hidden, m.heads): m for m in MODELS.values()
                if m.name.startswith("gpt-")}
    out = []
    for r in csv.DictReader(lines):
        model = by_shape[(int(r["layers"]), int(r["hidden"]), int(r["heads"]))]
        layout = Layout(int(r["tp"]), int(r["pp"]), int(r["dp"]), micro_batch=1, zero=0,
                        recompute="full", attention="eager")
        out.append(PublishedRow(model, layout, int(r["global_batch"]),
                                float(r["tflops_per_gpu"])))
    return out


def relative_error(row: PublishedRow, gpu: GpuSpec, efficiency: float,
                   traffic: float | None = None) -> float:
    """(predicted - published) / published TFLOP/s per GPU."""
    got = estimate(row.model, gpu, SELENE, row.layout, row.global_batch,
                   efficiency=efficiency, traffic=traffic).tflops_per_gpu
    return got / row.tflops_per_gpu - 1


def fit_efficiency(rows: list[PublishedRow], gpu: GpuSpec,
                   traffic: float | None = None) -> float:
    """The efficiency whose largest relative error over ``rows`` is smallest, at ``traffic``
    (bisection: the errors grow with the efficiency, so the optimum balances the extremes)."""
    low, high = 0.05, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        errors = [relative_error(r, gpu, mid, traffic) for r in rows]
        if max(errors) + min(errors) > 0:
            high = mid
        else:
            low = mid
    return round((low + high) / 2, 3)


def llama_405b_estimate(efficiency: float | None = None) -> tuple[Layout, Any]:
    """The layout ``--evaluate`` chooses for ``LLAMA_405B`` (TP and PP given) and its estimate."""
    from dataclasses import replace

    from slurm_arnold.plan.catalog import GPUS
    from slurm_arnold.plan.search import evaluate_best

    c = LLAMA_405B
    model = replace(MODELS["llama3-405b"], seq_len=int(c["seq"]))
    tp, pp = int(c["tp"]), int(c["pp"])
    lay, est, _ = evaluate_best(model, GPUS["h100-80g"], H100_CLUSTER,
                                Layout(tp, pp, int(c["gpus"]) // (tp * pp)), set(),
                                int(c["batch"]), efficiency=efficiency)
    return lay, est


def flash_run_estimate(run: dict[str, Any]) -> tuple[Layout, Any]:
    """The layout ``--evaluate`` chooses for one of ``FLASH_RUNS`` given what the run fixed
    (data parallel on one node: TP 1, PP 1; FlashAttention, the default) and its estimate."""
    from slurm_arnold.plan.catalog import GPUS
    from slurm_arnold.plan.search import evaluate_best

    lay, est, _ = evaluate_best(run["model"], GPUS["a100-80g"], SELENE,
                                Layout(1, 1, int(run["gpus"])), set(), int(run["batch"]))
    return lay, est


def fit_h100_efficiency() -> float:
    """The H100 efficiency at which ``llama_405b_estimate`` gives the published TFLOP/s
    (bisection; more efficiency, more TFLOP/s)."""
    low, high = 0.3, 1.0
    for _ in range(30):
        mid = (low + high) / 2
        if llama_405b_estimate(mid)[1].tflops_per_gpu > LLAMA_405B["published_tflops"]:
            high = mid
        else:
            low = mid
    return round((low + high) / 2, 3)


def fit_roofline(rows: list[PublishedRow], gpu: GpuSpec) -> tuple[float, float, float]:
    """(efficiency, traffic, largest error) minimising the largest relative error over
    ``rows``: the traffic on a grid of quarters from 0 to 10, the efficiency by bisection."""
    best = (math.inf, 0.0, 0.0)
    for quarter in range(41):
        traffic = quarter / 4
        eff = fit_efficiency(rows, gpu, traffic)
        worst = max(abs(relative_error(r, gpu, eff, traffic)) for r in rows)
        if worst < best[0] - 1e-12:
            best = (worst, eff, traffic)
    return best[1], best[2], best[0]
