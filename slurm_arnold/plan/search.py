"""``arnold plan``: the fastest layout that fits, exact over its space.

The space: TP a power of two dividing the heads, up to a node's GPUs; CP 1-8 for sequences of
8192 tokens and more; EP dividing the experts and DP x CP (MoE models); any PP up to the
layers with DP the rest of the GPUs; the rank order (``tp-dp-pp``: compact DP groups,
``tp-pp-dp``: compact pipelines), which sets the network level of every group and stage
boundary; micro-batch dividing the per-replica batch (up to 8); recomputation none, selective,
full; interleaving 1, 2, 4 where equal stages divide; ZeRO 0-3; and, without interleaving, any
cut of the layers into stages: NEST's dynamic program's answer (``nest.best_cut``, which
finds the recursion's cut by a threshold search) with memory feasibility inside it.
"""

from __future__ import annotations

import bisect
import itertools
import math
import time
from dataclasses import dataclass, replace
from typing import Any

from site_config.settings import NetworkTiers
from slurm_arnold.errors import ArnoldError, InfeasibleError
from slurm_arnold.plan.catalog import GpuSpec, ModelSpec
from slurm_arnold.plan.cost import (
    LEAF_NODES,
    ORDERS,
    RECOMPUTE,
    Estimate,
    Layout,
    StageModel,
    estimate,
    estimate_stages,
    smallest_fitting_gpus,
    stage_model,
)
from slurm_arnold.plan.nest import best_cut


@dataclass(frozen=True)
class Plan:
    """The winner, the runners-up, and how long the search took."""

    layout: Layout
    estimate: Estimate
    alternatives: list[tuple[Layout, Estimate]]
    evaluated: int
    search_seconds: float
    pruned: int = 0


LONG_CONTEXT = 8192  # CP is searched from this sequence length on (ring attention's use)


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def templates(model: ModelSpec, gpus: int, global_batch: int, gpus_per_node: int, *,
              attention: str = "flash", sequence_parallel: bool = True) -> list[Layout]:
    """Every layout of the job up to its cut and ZeRO stage (both chosen by the search), with
    the software stack's ``attention`` kernel and ``sequence_parallel`` (not the search's
    to choose: the stack has them or not)."""
    out = []
    tps = [t for t in (1, 2, 4, 8, 16) if t <= gpus_per_node and model.heads % t == 0
           and gpus % t == 0]
    cps = [c for c in (1, 2, 4, 8) if model.seq_len % c == 0
           and (c == 1 or model.seq_len >= LONG_CONTEXT)]
    for tp in tps:
        for cp in cps:
            for pp in range(1, min(model.layers, gpus // (tp * cp)) + 1):
                if gpus % (tp * cp * pp):
                    continue
                dp = gpus // (tp * cp * pp)
                if global_batch % dp:
                    continue
                per_replica = global_batch // dp
                eps = [e for e in _divisors(model.experts) if (dp * cp) % e == 0]
                orders = ORDERS if pp > 1 and dp * cp > 1 else ORDERS[:1]
                for mb in (b for b in (1, 2, 4, 8) if per_replica % b == 0):
                    for v in (1, 2, 4):
                        if v > 1 and (pp == 1 or model.layers % pp
                                      or (model.layers // pp) % v):
                            continue
                        for rc in RECOMPUTE:
                            for ep in eps:
                                for order in orders:
                                    out.append(Layout(tp, pp, dp, micro_batch=mb, zero=0,
                                                      recompute=rc, interleave=v, cp=cp,
                                                      ep=ep, order=order,
                                                      attention=attention,
                                                      sequence_parallel=sequence_parallel))
    return out


def _lower_bound(sm: StageModel, layers: int) -> float:
    """No cut's pipeline is faster: the slots' sum is fixed, the slowest at least the mean."""
    total = sum(sm.slot(k, 0) for k in range(sm.pp)) + layers * sm.layer_seconds
    if sm.interleave > 1:
        return (sm.microbatches + (sm.pp - 1) / sm.interleave) * total / sm.pp
    return (sm.microbatches - 1) * total / sm.pp + total


def search(model: ModelSpec, gpu: GpuSpec, network: NetworkTiers, gpus: int,
           global_batch: int, *, gpus_per_node: int = 8, top: int = 5,
           leaf_nodes: int = LEAF_NODES, equal_stages: bool = False,
           attention: str = "flash", sequence_parallel: bool = True) -> Plan:
    """The fastest layout that fits; ``InfeasibleError`` naming the GPU count that could.

    Each template (TP, CP, EP, PP, DP, rank order, micro-batch, recomputation, interleaving)
    is priced from its stage model; the cut comes from NEST's dynamic program
    (``nest.best_cut``, memory checked inside it), ZeRO stages are tried from 0 up while memory
    still binds the cut. Templates are taken in order of a lower bound on their time and those
    whose bound cannot beat the ``top + 1``-th best found are skipped: the winner and the
    runners-up are exactly those of the whole space. ``equal_stages`` restricts the cuts to
    equal stages (what the first version searched; the benchmark compares the two).
    ``attention`` and ``sequence_parallel``: the software stack's (see ``templates``)."""
    t0 = time.monotonic()
    limit = gpu.memory_bytes
    priced = []
    for lay in templates(model, gpus, global_batch, gpus_per_node, attention=attention,
                         sequence_parallel=sequence_parallel):
        if equal_stages and model.layers % lay.pp:
            continue
        sm = stage_model(model, gpu, network, lay, global_batch, gpus_per_node=gpus_per_node,
                         leaf_nodes=leaf_nodes)
        priced.append((_lower_bound(sm, model.layers), lay, sm))
    priced.sort(key=lambda x: x[0])
    bests: list[float] = []  # the best step of each template tried, sorted
    scored: list[tuple[float, Layout, Estimate]] = []
    evaluated = pruned = 0
    for bound, lay, sm0 in priced:
        if len(bests) > top and bound >= bests[top]:
            pruned += 1
            continue
        free_bottleneck = None
        template_best = math.inf
        for zero in (0, 1, 2, 3) if lay.dp * lay.cp > 1 else (0,):
            zl = replace(lay, zero=zero)
            sm = sm0 if zero == 0 else stage_model(model, gpu, network, zl, global_batch,
                                                   gpus_per_node=gpus_per_node,
                                                   leaf_nodes=leaf_nodes)
            evaluated += 1
            if lay.interleave > 1 or equal_stages:
                cut = zl.stage_layers(model.layers)
                if any(sm.memory(k, n) > limit for k, n in enumerate(cut)):
                    continue
                bottleneck = max(sm.slot(k, n) for k, n in enumerate(cut))
            else:
                bottleneck, cut = best_cut(sm, model.layers, limit)
                if not cut:
                    continue
            est = estimate_stages(model, gpu, zl, global_batch, sm, cut)
            equal = len(set(cut)) == 1 and model.layers % lay.pp == 0
            final = replace(zl, stages=() if equal else cut)
            scored.append((est.step_seconds, final, est))
            template_best = min(template_best, est.step_seconds)
            if free_bottleneck is None:
                free_bottleneck = bottleneck if lay.interleave > 1 or equal_stages else \
                    best_cut(sm, model.layers, math.inf)[0]
            if bottleneck <= free_bottleneck * (1 + 1e-12):
                break  # memory no longer binds: more sharding cannot be faster
        if template_best < math.inf:
            bisect.insort(bests, template_best)
    if not scored:
        need = smallest_fitting(model, gpu, network, global_batch, gpus_per_node,
                                attention=attention, sequence_parallel=sequence_parallel)
        raise InfeasibleError(
            f"{model.name} does not fit on {gpus} x {gpu.name} with global batch {global_batch}"
            f" in any layout; " + (f"the smallest job that fits has {need} GPUs: ask for that"
                                   if need else "no job up to 65,536 GPUs fits this batch; "
                                   "change the global batch"))
    # Ties go to the simpler layout: less sharding, less recomputation, no interleaving,
    # Megatron's rank order, equal stages.
    scored.sort(key=lambda x: (round(x[0], 9), x[1].zero, RECOMPUTE.index(x[1].recompute),
                               x[1].interleave, x[1].micro_batch, ORDERS.index(x[1].order),
                               bool(x[1].stages), x[1].cp, x[1].ep))
    _, best, est = scored[0]
    # Runners-up differ in more than the ZeRO stage: one per shape, its simplest variant.
    seen = {_shape(best)}
    alternatives = []
    for _, lay, e in scored[1:]:
        if _shape(lay) in seen:
            continue
        seen.add(_shape(lay))
        alternatives.append((lay, e))
        if len(alternatives) == top:
            break
    return Plan(best, est, alternatives, evaluated, time.monotonic() - t0, pruned)


def smallest_fitting(model: ModelSpec, gpu: GpuSpec, network: NetworkTiers, global_batch: int,
                     gpus_per_node: int, *, attention: str = "flash",
                     sequence_parallel: bool = True) -> int | None:
    """The fewest GPUs (whole nodes) with some layout and cut that fit in memory, from the
    floor the weights and Adam states set (ZeRO-3) upwards; ``None`` beyond 65,536. Only the
    leanest variant of each template is tried: ZeRO-3 (where DP > 1), full recomputation,
    micro-batch 1, no interleaving; ``attention`` and ``sequence_parallel`` as ``search``'s."""
    n = max(gpus_per_node, math.ceil(smallest_fitting_gpus(model, gpu) / gpus_per_node)
            * gpus_per_node)
    while n <= 65_536:
        for lay in templates(model, n, global_batch, gpus_per_node, attention=attention,
                             sequence_parallel=sequence_parallel):
            if lay.micro_batch > 1 or lay.interleave > 1 or lay.recompute != "full":
                continue
            lean = replace(lay, zero=3 if lay.dp * lay.cp > 1 else 0)
            sm = stage_model(model, gpu, network, lean, global_batch,
                             gpus_per_node=gpus_per_node)
            if best_cut(sm, model.layers, gpu.memory_bytes)[1]:
                return n
        n += gpus_per_node
    return None


def _shape(layout: Layout) -> tuple[object, ...]:
    return (layout.tp, layout.pp, layout.dp, layout.cp, layout.ep, layout.micro_batch,
            layout.interleave, layout.recompute, layout.order)


def why(best: tuple[Layout, Estimate], other: tuple[Layout, Estimate]) -> str:
    """The biggest differences in time between the winner and a runner-up."""
    (_, a), (_, b) = best, other
    parts = {"compute": b.compute_seconds - a.compute_seconds,
             "pipeline bubble": b.bubble_seconds - a.bubble_seconds,
             "TP/CP/EP communication": b.tp_seconds - a.tp_seconds,
             "PP communication": b.pp_seconds - a.pp_seconds,
             "DP communication": b.dp_seconds - a.dp_seconds}
    worst = [kv for kv in sorted(parts.items(), key=lambda kv: -abs(kv[1]))[:2]
             if abs(kv[1]) > 1e-6]
    memory = f"{b.memory_gib_per_gpu - a.memory_gib_per_gpu:+.1f} GiB per GPU"
    if not worst:
        return f"same predicted time, {memory}"
    return ", ".join(f"{name} {delta:+.3f} s" for name, delta in worst) + f"; {memory}"


#: What ``arnold plan --evaluate`` chooses itself when the command line does not say (Layout's
#: field names); TP, PP, DP, CP, EP, the attention kernel and sequence parallelism are always
#: the user's.
CHOOSABLE = ("recompute", "micro_batch", "zero", "interleave", "order")


def evaluate_best(model: ModelSpec, gpu: GpuSpec, network: NetworkTiers, fixed: Layout,
                  given: set[str], global_batch: int, *, gpus_per_node: int = 8,
                  leaf_nodes: int = LEAF_NODES,
                  efficiency: float | None = None) -> tuple[Layout, Estimate, list[str]]:
    """``--evaluate``: the fastest variant of ``fixed`` that fits, over every value of the
    ``CHOOSABLE`` fields not in ``given`` (the fastest of all when none fits), its cut the
    given one, else equal stages where PP divides the layers, else NEST's best cut
    (``evaluate_cut``). Returns the layout, its estimate and the fields it chose."""
    per_replica = global_batch // fixed.dp if global_batch % fixed.dp == 0 else 0
    stages_fixed = fixed.stages or (() if model.layers % fixed.pp else
                                    fixed.stage_layers(model.layers))
    smallest = min(stages_fixed) if stages_fixed else model.layers // fixed.pp
    options: dict[str, tuple[Any, ...]] = {
        "recompute": RECOMPUTE,
        "micro_batch": tuple(b for b in (1, 2, 4, 8) if per_replica and per_replica % b == 0)
        or (fixed.micro_batch,),
        "zero": (0, 1, 2, 3),
        "interleave": tuple(v for v in (1, 2, 3, 4) if v == 1 or (fixed.pp > 1 and v <= smallest)),
        "order": ORDERS if fixed.pp > 1 and fixed.dp * fixed.cp > 1 else (fixed.order,),
    }
    free = [f for f in CHOOSABLE if f not in given]
    best: tuple[tuple[bool, float], Layout, Estimate] | None = None
    refusal: ArnoldError | None = None
    for values in itertools.product(*(options[f] for f in free)):
        lay = replace(fixed, **dict(zip(free, values, strict=True)))
        try:
            if not lay.stages and model.layers % lay.pp:
                lay = replace(lay, stages=evaluate_cut(model, gpu, network, lay, global_batch,
                                                       gpus_per_node=gpus_per_node,
                                                       leaf_nodes=leaf_nodes,
                                                       efficiency=efficiency))
            est = estimate(model, gpu, network, lay, global_batch,
                           gpus_per_node=gpus_per_node, leaf_nodes=leaf_nodes,
                           efficiency=efficiency)
        except ArnoldError as exc:
            # e.g. a chosen interleaving the dynamic program's cut leaves a stage too short
            # for: that combination is not a layout of the job; the others may be.
            refusal = exc
            continue
        key = (not est.fits, est.step_seconds)
        if best is None or key < best[0]:
            best = (key, lay, est)
    if best is None:
        assert refusal is not None  # the product has at least the empty combination
        raise refusal
    return best[1], best[2], free


def evaluate_cut(model: ModelSpec, gpu: GpuSpec, network: NetworkTiers, layout: Layout,
                 global_batch: int, *, gpus_per_node: int = 8,
                 leaf_nodes: int = LEAF_NODES, efficiency: float | None = None,
                 ) -> tuple[int, ...]:
    """Layers per stage for ``layout``: NEST's dynamic program's best cut into ``layout.pp``
    stages that fits in memory (``nest.best_cut``), else the fastest cut (whose estimate then
    says it does not fit)."""
    sm = stage_model(model, gpu, network, layout, global_batch, gpus_per_node=gpus_per_node,
                     leaf_nodes=leaf_nodes, efficiency=efficiency)
    _, cut = best_cut(sm, model.layers, gpu.memory_bytes)
    if not cut:
        _, cut = best_cut(sm, model.layers, math.inf)
    if not cut:
        raise InfeasibleError(f"{layout.pp} stages exceed the {model.layers} layers; "
                              "use a smaller --pp")
    return cut


def plan_json(model: ModelSpec, layout: Layout, est: Estimate, *, search_seconds: float = 0.0,
              alternatives: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The ``arnold plan --json`` object."""
    bounds = list(itertools.accumulate(layout.stage_layers(model.layers), initial=0))
    return {
        "model": model.name, "gpus": layout.gpus,
        "tp": layout.tp, "pp": layout.pp, "dp": layout.dp, "cp": layout.cp, "ep": layout.ep,
        "zero": layout.zero, "recompute": layout.recompute, "micro_batch": layout.micro_batch,
        "interleave": layout.interleave,
        "stages": [[a, b - 1] for a, b in itertools.pairwise(bounds)],
        "rank_order": layout.order, "attention": layout.attention,
        "sequence_parallel": layout.sequence_parallel,
        "step_seconds": round(est.step_seconds, 4),
        "tflops_per_gpu": round(est.tflops_per_gpu, 2), "mfu": round(est.mfu, 4),
        "memory_gib_per_gpu": round(est.memory_gib_per_gpu, 2), "fits": est.fits,
        "breakdown": {k: round(v, 4) for k, v in est.as_dict().items()
                      if k.endswith("_seconds") and k != "step_seconds"},
        "search_seconds": round(search_seconds, 4), "alternatives": alternatives or [],
    }
