"""Published figures the cost model is fitted on or checked against: Megatron-LM SC'21 Table 1
(the A100 calibration), Meta's Llama 3 405B run (the H100 figure), the flash-attention
repository's runs (the default attention) and MosaicML's one-node H100 runs (another stack).

Selene (the paper's machine): DGX A100 nodes, NVLink 3 (300 GB/s per GPU and direction), one
200 Gb/s HDR InfiniBand adapter per GPU, a non-blocking fat tree.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass, replace
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
#: at 0b037c2d): one node of 8 x A100 80GB SXM4 (400 W) with NVLink, every GPT-3 row of its
#: table: 125M, 355M and 760M (batches of 0.5M tokens, 256 sequences), 1.3B and 2.7B (head
#: dimension 128, "gpt3-2.7B-flash-hdim128"; 1M tokens, 512 sequences), shapes as the GPT-3
#: paper's Table 2.1 (1.3B with 16 heads, as the README builds it), sequence 2,048, vocabulary
#: padded to a multiple of 8, no activation checkpointing; throughput in tokens per second as
#: published. None enters any fit.
FLASH_RUNS: tuple[dict[str, Any], ...] = (
    {"model": ModelSpec("gpt3-125m", 12, 768, 12, 4 * 768, 50264, 2048), "gpus": 8,
     "batch": 256, "tokens_per_s": 1_310_000.0},
    {"model": ModelSpec("gpt3-355m", 24, 1024, 16, 4 * 1024, 50264, 2048), "gpus": 8,
     "batch": 256, "tokens_per_s": 503_000.0},
    {"model": ModelSpec("gpt3-760m", 24, 1536, 16, 4 * 1536, 50264, 2048), "gpus": 8,
     "batch": 256, "tokens_per_s": 245_000.0},
    {"model": ModelSpec("gpt3-1.3b", 24, 2048, 16, 4 * 2048, 50264, 2048), "gpus": 8,
     "batch": 512, "tokens_per_s": 169_000.0},
    {"model": ModelSpec("gpt3-2.7b-hdim128", 32, 2560, 20, 4 * 2560, 50264, 2048), "gpus": 8,
     "batch": 512, "tokens_per_s": 85_000.0},
)

#: Megatron-LM of 2022 on Selene (the A100 fit's machine), fitted on by nothing: Korthikanti et
#: al., "Reducing Activation Recomputation in Large Transformer Models" (MLSys 2023), Table 3
#: (shapes and layouts: TP 8, no data parallelism, micro-batch 4 for 22B and 1 above;
#: sequence 2,048, vocabulary 51,200; interleaved over 3 chunks for 175B and 530B, section 6)
#: and Table 5 (seconds per iteration): with full recomputation and no sequence parallelism
#: (``full_s``) and with sequence parallelism and selective recomputation (``present_s``), eager
#: attention both (FlashAttention came later). The last row is section 6.3's 530B at 8-way data
#: parallelism (2,240 GPUs, batch scaled with it), which the paper gives for the latter only.
KORTHIKANTI_RUNS: tuple[dict[str, Any], ...] = (
    {"model": ModelSpec("gpt-22b", 48, 6144, 64, 4 * 6144, 51200, 2048), "tp": 8, "pp": 1,
     "dp": 1, "batch": 4, "micro_batch": 4, "interleave": 1, "full_s": 1.42,
     "present_s": 1.10},
    {"model": ModelSpec("gpt-175b", 96, 12288, 96, 4 * 12288, 51200, 2048), "tp": 8, "pp": 8,
     "dp": 1, "batch": 64, "micro_batch": 1, "interleave": 3, "full_s": 18.13,
     "present_s": 13.75},
    {"model": MODELS["gpt-529.6b"], "tp": 8, "pp": 35, "dp": 1, "batch": 280, "micro_batch": 1,
     "interleave": 3, "full_s": 49.05, "present_s": 37.83},
    {"model": MODELS["gpt-1008b"], "tp": 8, "pp": 64, "dp": 1, "batch": 512, "micro_batch": 1,
     "interleave": 1, "full_s": 94.42, "present_s": 71.49},
    {"model": MODELS["gpt-529.6b"], "tp": 8, "pp": 35, "dp": 8, "batch": 2240,
     "micro_batch": 1, "interleave": 3, "full_s": None, "present_s": 39.15},
)

#: MosaicML's MPT models (llm-foundry ``scripts/train/yamls/pretrain/mpt-*.yaml``: layers,
#: d_model, heads; FFN 4 d_model; vocabulary 50,368).
MPT_SHAPES = {"mpt-760m": (24, 1536, 12), "mpt-1b": (24, 2048, 16), "mpt-3b": (32, 2560, 20),
              "mpt-7b": (32, 4096, 32), "mpt-13b": (40, 5120, 40), "mpt-30b": (48, 7168, 56)}
#: Published H100 runs on another software stack, to check the H100 figure against: every
#: one-node (8 x H100 80GB, bf16) row of llm-foundry's ``scripts/train/benchmarking/README.md``
#: (mosaicml/llm-foundry at 061f2c7c, "H100 80GB BF16"): PyTorch FSDP full sharding (ZeRO-3),
#: its FlashAttention kernels, the micro-batch, gradient accumulation and activation
#: checkpointing (full recomputation) each row ran with, and its tokens per second per GPU.
#: (model, sequence, micro-batch, accumulation, checkpointing, tokens/s per GPU)
MOSAIC_H100_RUNS: tuple[tuple[str, int, int, int, bool, float], ...] = (
    ("mpt-30b", 8192, 1, 21, True, 1384), ("mpt-30b", 4096, 1, 21, True, 1802),
    ("mpt-30b", 2048, 3, 21, True, 2002), ("mpt-30b", 1024, 6, 21, True, 2084),
    ("mpt-13b", 32768, 1, 3, True, 1976), ("mpt-13b", 16384, 3, 3, True, 2985),
    ("mpt-13b", 4096, 10, 3, True, 4717), ("mpt-13b", 2048, 2, 1, False, 4792),
    ("mpt-13b", 1024, 40, 3, True, 5502), ("mpt-7b", 65536, 1, 2, True, 1956),
    ("mpt-7b", 32768, 2, 2, True, 3318), ("mpt-7b", 8192, 8, 2, True, 6935),
    ("mpt-7b", 4096, 16, 2, True, 8611), ("mpt-7b", 2048, 6, 1, False, 10643),
    ("mpt-7b", 1024, 64, 2, True, 10203), ("mpt-3b", 65536, 1, 2, True, 3262),
    ("mpt-3b", 32768, 3, 6, True, 5873), ("mpt-3b", 16384, 1, 6, False, 11152),
    ("mpt-3b", 8192, 3, 6, False, 16578), ("mpt-3b", 4096, 5, 6, False, 20964),
    ("mpt-3b", 1024, 20, 6, False, 27046), ("mpt-3b", 512, 40, 6, False, 27965),
    ("mpt-1b", 65536, 1, 2, True, 5506), ("mpt-1b", 32768, 1, 4, False, 12025),
    ("mpt-1b", 16384, 2, 4, False, 19649), ("mpt-1b", 8192, 3, 4, False, 29157),
    ("mpt-1b", 4096, 7, 4, False, 38535), ("mpt-1b", 2048, 14, 1, False, 45455),
    ("mpt-1b", 1024, 18, 4, False, 48910), ("mpt-1b", 512, 56, 4, False, 52275),
    ("mpt-760m", 32768, 1, 2, False, 16291), ("mpt-760m", 16384, 3, 2, False, 27815),
    ("mpt-760m", 8192, 6, 2, False, 41825), ("mpt-760m", 4096, 12, 2, False, 55459),
    ("mpt-760m", 2048, 24, 2, False, 63147), ("mpt-760m", 1024, 48, 2, False, 78581),
    ("mpt-760m", 512, 96, 2, False, 83749),
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
    batch 1, full recomputation, no ZeRO, eager attention, no sequence parallelism: the paper
    predates FlashAttention and Korthikanti et al.'s sequence parallelism)."""
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    by_shape = {(m.layers, m.hidden, m.heads): m for m in MODELS.values()
                if m.name.startswith("gpt-")}
    out = []
    for r in csv.DictReader(lines):
        model = by_shape[(int(r["layers"]), int(r["hidden"]), int(r["heads"]))]
        layout = Layout(int(r["tp"]), int(r["pp"]), int(r["dp"]), micro_batch=1, zero=0,
                        recompute="full", attention="eager", sequence_parallel=False)
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


def korthikanti_layouts(run: dict[str, Any]) -> tuple[Layout, Layout]:
    """The two layouts of one of ``KORTHIKANTI_RUNS`` as the paper ran them: full
    recomputation without sequence parallelism, and sequence parallelism with selective
    recomputation (eager attention, no ZeRO: the paper has neither)."""
    full = Layout(int(run["tp"]), int(run["pp"]), int(run["dp"]),
                  micro_batch=int(run["micro_batch"]), zero=0, recompute="full",
                  interleave=int(run["interleave"]), attention="eager",
                  sequence_parallel=False)
    return full, replace(full, recompute="selective", sequence_parallel=True)


def korthikanti_evaluate(run: dict[str, Any]) -> tuple[Layout, Any]:
    """What ``arnold plan --evaluate --attention eager`` (sequence parallelism on, the default)
    chooses for one of ``KORTHIKANTI_RUNS`` given its model, GPUs, batch, TP and PP."""
    from slurm_arnold.plan.catalog import GPUS
    from slurm_arnold.plan.search import evaluate_best

    bare = Layout(int(run["tp"]), int(run["pp"]), int(run["dp"]), attention="eager")
    lay, est, _ = evaluate_best(run["model"], GPUS["a100-80g"], SELENE, bare, set(),
                                int(run["batch"]))
    return lay, est


def mosaic_tokens_per_gpu(run: tuple[str, int, int, int, bool, float],
                          efficiency: float | None = None) -> float:
    """Predicted tokens per second per GPU of one of ``MOSAIC_H100_RUNS`` as it ran (TP 1,
    PP 1, DP 8 on one node, ZeRO-3, its micro-batch and recomputation, FlashAttention)."""
    from slurm_arnold.plan.catalog import GPUS

    name, seq, micro, accumulation, checkpointing, _ = run
    layers, hidden, heads = MPT_SHAPES[name]
    model = ModelSpec(name, layers, hidden, heads, 4 * hidden, 50368, seq)
    layout = Layout(1, 1, 8, micro_batch=micro, zero=3,
                    recompute="full" if checkpointing else "none")
    batch = micro * accumulation * 8
    est = estimate(model, GPUS["h100-80g"], H100_CLUSTER, layout, batch, efficiency=efficiency)
    return batch * seq / est.step_seconds / 8


#: The MosaicML rows a site on that stack would calibrate on: sequences up to the models'
#: training length, where attention is a small part of the work; the longer ones check it.
MOSAIC_FIT_SEQ = 2048


def fit_mosaic_efficiency() -> float:
    """The efficiency (a GPU file's ``efficiency``) whose largest relative error over the
    MosaicML rows of at most ``MOSAIC_FIT_SEQ`` tokens is smallest (bisection, as
    ``fit_efficiency``): what a site running that stack would put in its GPU file."""
    rows = [r for r in MOSAIC_H100_RUNS if r[1] <= MOSAIC_FIT_SEQ]
    low, high = 0.05, 1.0
    for _ in range(40):
        mid = (low + high) / 2
        errors = [mosaic_tokens_per_gpu(r, mid) / r[5] - 1 for r in rows]
        if max(errors) + min(errors) > 0:
            high = mid
        else:
            low = mid
    return round((low + high) / 2, 3)


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
