"""Megatron-LM SC'21 Table 1 as test data for the cost model, and the A100 calibration.

Selene (the paper's machine): DGX A100 nodes, NVLink 3 (300 GB/s per GPU and direction), one
200 Gb/s HDR InfiniBand adapter per GPU, a non-blocking fat tree.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from site_config.settings import LinkTier, NetworkTiers
from slurm_arnold.plan.catalog import MODELS, GpuSpec, ModelSpec
from slurm_arnold.plan.cost import Layout, estimate

SELENE = NetworkTiers(nvlink=LinkTier(bandwidth_gbps=2400.0, latency_us=2.0),
                      leaf=LinkTier(bandwidth_gbps=200.0, latency_us=5.0),
                      minipod=LinkTier(bandwidth_gbps=200.0, latency_us=8.0),
                      core=LinkTier(bandwidth_gbps=200.0, latency_us=12.0))
#: The rows the A100 efficiency is fitted on: the smallest and the largest model.
CALIBRATION_ROWS = ("gpt-1.7b", "gpt-1008b")


@dataclass(frozen=True)
class PublishedRow:
    """One row of Table 1: the model, its published layout and throughput."""

    model: ModelSpec
    layout: Layout
    global_batch: int
    tflops_per_gpu: float


def read_table(path: Path) -> list[PublishedRow]:
    """The rows of ``megatron-sc21-table1.csv`` matched to the catalogue's GPT models (micro-
    batch 1, full recomputation, no ZeRO, as in the paper)."""
    lines = [ln for ln in path.read_text().splitlines() if ln and not ln.startswith("#")]
    by_shape = {(m.layers, m.hidden, m.heads): m for m in MODELS.values()
                if m.name.startswith("gpt-")}
    out = []
    for r in csv.DictReader(lines):
        model = by_shape[(int(r["layers"]), int(r["hidden"]), int(r["heads"]))]
        layout = Layout(int(r["tp"]), int(r["pp"]), int(r["dp"]), micro_batch=1, zero=0,
                        recompute="full")
        out.append(PublishedRow(model, layout, int(r["global_batch"]),
                                float(r["tflops_per_gpu"])))
    return out


def relative_error(row: PublishedRow, gpu: GpuSpec, efficiency: float) -> float:
    """(predicted - published) / published TFLOP/s per GPU."""
    got = estimate(row.model, gpu, SELENE, row.layout, row.global_batch,
                   efficiency=efficiency).tflops_per_gpu
    return got / row.tflops_per_gpu - 1


def fit_efficiency(rows: list[PublishedRow], gpu: GpuSpec) -> float:
    """The efficiency whose largest relative error over ``rows`` is smallest (bisection:
    the errors grow with the efficiency, so the optimum balances the extreme ones)."""
    low, high = 0.05, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        errors = [relative_error(r, gpu, mid) for r in rows]
        if max(errors) + min(errors) > 0:
            high = mid
        else:
            low = mid
    return round((low + high) / 2, 3)
