"""``arnold plan``: the fastest layout that fits, by exhaustive search over uniform layouts.

The space: TP a power of two dividing the heads, up to a node's GPUs; PP dividing the layers
(equal stages); DP the rest of the GPUs; micro-batch dividing the per-replica batch (up to 8);
ZeRO 0-3; recomputation none, selective, full; interleaving 1, 2, 4 where the stages divide.
Every point is priced by the cost model (``cost.estimate``); memory is checked for each, so
only layouts that fit compete. Exact over that space. NEST's dynamic program (unequal stages,
a network level per stage boundary) searches a larger one; it is the next step.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from site_config.settings import NetworkTiers
from slurm_arnold.errors import InfeasibleError
from slurm_arnold.plan.catalog import GpuSpec, ModelSpec
from slurm_arnold.plan.cost import (
    LEAF_NODES,
    RECOMPUTE,
    Estimate,
    Layout,
    estimate,
    memory_bytes,
    smallest_fitting_gpus,
)


@dataclass(frozen=True)
class Plan:
    """The winner, the runners-up, and how long the search took."""

    layout: Layout
    estimate: Estimate
    alternatives: list[tuple[Layout, Estimate]]
    evaluated: int
    search_seconds: float


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def candidates(model: ModelSpec, gpus: int, global_batch: int,
               gpus_per_node: int) -> list[Layout]:
    """Every uniform layout of the job."""
    out = []
    tps = [t for t in (1, 2, 4, 8, 16) if t <= gpus_per_node and model.heads % t == 0
           and gpus % t == 0]
    for tp in tps:
        for pp in _divisors(model.layers):
            if gpus % (tp * pp):
                continue
            dp = gpus // (tp * pp)
            if global_batch % dp:
                continue
            per_replica = global_batch // dp
            for mb in (b for b in (1, 2, 4, 8) if per_replica % b == 0):
                for v in (1, 2, 4):
                    if v > 1 and (pp == 1 or (model.layers // pp) % v):
                        continue
                    for zero in (0, 1, 2, 3):
                        if zero and dp == 1:
                            continue
                        for rc in RECOMPUTE:
                            out.append(Layout(tp, pp, dp, micro_batch=mb, zero=zero,
                                              recompute=rc, interleave=v))
    return out


def search(model: ModelSpec, gpu: GpuSpec, network: NetworkTiers, gpus: int,
           global_batch: int, *, gpus_per_node: int = 8, top: int = 5,
           leaf_nodes: int = LEAF_NODES) -> Plan:
    """The fastest layout that fits; ``InfeasibleError`` naming the GPU count that could."""
    t0 = time.monotonic()
    scored: list[tuple[float, Layout, Estimate]] = []
    layouts = candidates(model, gpus, global_batch, gpus_per_node)
    for layout in layouts:
        est = estimate(model, gpu, network, layout, global_batch, gpus_per_node=gpus_per_node,
                       leaf_nodes=leaf_nodes)
        if est.fits:
            scored.append((est.step_seconds, layout, est))
    if not scored:
        need = smallest_fitting(model, gpu, global_batch, gpus_per_node)
        raise InfeasibleError(
            f"{model.name} does not fit on {gpus} x {gpu.name} with global batch {global_batch}"
            f" in any layout; " + (f"the smallest job that fits has {need} GPUs: ask for that"
                                   if need else "no job up to 65,536 GPUs fits this batch; "
                                   "change the global batch"))
    # Ties go to the simpler layout: less sharding, less recomputation, no interleaving.
    scored.sort(key=lambda x: (round(x[0], 9), x[1].zero, RECOMPUTE.index(x[1].recompute),
                               x[1].interleave, x[1].micro_batch))
    _, best, est = scored[0]
    # Runners-up differ in more than the ZeRO stage (which the time model prices alike
    # unless it is ZeRO-3): one per shape, its simplest variant.
    seen = {_shape(best)}
    alternatives = []
    for _, lay, e in scored[1:]:
        if _shape(lay) in seen:
            continue
        seen.add(_shape(lay))
        alternatives.append((lay, e))
        if len(alternatives) == top:
            break
    return Plan(best, est, alternatives, len(layouts), time.monotonic() - t0)


def smallest_fitting(model: ModelSpec, gpu: GpuSpec, global_batch: int,
                     gpus_per_node: int) -> int | None:
    """The fewest GPUs (whole nodes) with some layout that fits in memory, from the floor its
    weights and Adam states set (ZeRO-3) upwards; ``None`` beyond 65,536."""
    n = max(gpus_per_node, math.ceil(smallest_fitting_gpus(model, gpu) / gpus_per_node)
            * gpus_per_node)
    while n <= 65_536:
        if any(memory_bytes(model, lay) <= gpu.memory_bytes
               for lay in candidates(model, n, global_batch, gpus_per_node)):
            return n
        n += gpus_per_node
    return None


def _shape(layout: Layout) -> tuple[int, ...]:
    return (layout.tp, layout.pp, layout.dp, layout.micro_batch, layout.interleave,
            RECOMPUTE.index(layout.recompute))


def why(best: tuple[Layout, Estimate], other: tuple[Layout, Estimate]) -> str:
    """The biggest differences in time between the winner and a runner-up."""
    (_, a), (_, b) = best, other
    parts = {"compute": b.compute_seconds - a.compute_seconds,
             "pipeline bubble": b.bubble_seconds - a.bubble_seconds,
             "TP communication": b.tp_seconds - a.tp_seconds,
             "PP communication": b.pp_seconds - a.pp_seconds,
             "DP communication": b.dp_seconds - a.dp_seconds}
    worst = [kv for kv in sorted(parts.items(), key=lambda kv: -abs(kv[1]))[:2]
             if abs(kv[1]) > 1e-6]
    memory = f"{b.memory_gib_per_gpu - a.memory_gib_per_gpu:+.1f} GiB per GPU"
    if not worst:
        return f"same predicted time, {memory}"
    return ", ".join(f"{name} {delta:+.3f} s" for name, delta in worst) + f"; {memory}"


def plan_json(model: ModelSpec, layout: Layout, est: Estimate, *, search_seconds: float = 0.0,
              alternatives: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The ``arnold plan --json`` object."""
    per_stage = model.layers // layout.pp
    return {
        "model": model.name, "gpus": layout.gpus,
        "tp": layout.tp, "pp": layout.pp, "dp": layout.dp, "cp": layout.cp, "ep": layout.ep,
        "zero": layout.zero, "recompute": layout.recompute, "micro_batch": layout.micro_batch,
        "interleave": layout.interleave,
        "stages": [[i * per_stage, (i + 1) * per_stage - 1] for i in range(layout.pp)],
        "step_seconds": round(est.step_seconds, 4),
        "tflops_per_gpu": round(est.tflops_per_gpu, 2), "mfu": round(est.mfu, 4),
        "memory_gib_per_gpu": round(est.memory_gib_per_gpu, 2), "fits": est.fits,
        "breakdown": {k: round(v, 4) for k, v in est.as_dict().items()
                      if k.endswith("_seconds") and k != "step_seconds"},
        "search_seconds": round(search_seconds, 4), "alternatives": alternatives or [],
    }
