"""The planner's cost model: FLOPs, memory and time of one training iteration of a layout.

Sources, part by part:

- **FLOPs** (Narayanan et al., SC'21, eq. 3): with full recomputation one iteration costs
  ``96 B s l h^2 (1 + s/(6h) + V/(16 l h))``: a forward pass is ``24 B s h^2 (1 + s/(6h))`` per
  layer plus ``2 B s h V`` for the logits, a backward pass twice that, recomputation one more
  forward. Without recomputation the factor is 72, with selective recomputation the attention
  score part (``s/(6h)``) is recomputed only. "Model" TFLOP/s per GPU counts what the paper
  counts (its formula, recomputation included) so it compares with its Table 1. Gated FFNs and
  grouped-query attention use the exact matrix sizes; an MoE layer computes ``top_k`` experts.
- **Compute time**: FLOPs / (efficiency x peak). One efficiency per GPU type
  (``EFFICIENCY``), calibrated once and stated there.
- **Activation memory** per layer and micro-batch (Korthikanti et al. 2022, Table 2):
  ``s b h (34 + 5 a s / h)`` without parallelism; with TP t: ``s b h (10 + 24/t + 5 a s/(h t))``;
  with TP + sequence parallelism ``s b h / t (34 + 5 a s / h)``; selective recomputation drops
  the ``5 a s / h`` term; full recomputation keeps ``2 s b h / t`` per layer. Under 1F1B the
  first stage holds ``p`` micro-batches of its ``l/p`` layers, i.e. ``l`` layers' worth
  (``x (1 + (p-1)/(p v))`` interleaved).
- **Weights, gradients, optimizer** (Rajbhandari et al., ZeRO): mixed-precision Adam keeps
  2 + 2 + 12 bytes per parameter; ZeRO-1 shards the 12 over DP, ZeRO-2 also the gradients,
  ZeRO-3 also the weights (at the price of all-gathering them).
- **Communication** on the alpha-beta model per tier: ring all-reduce ``2 (n-1)/n x S/B +
  2 (n-1) alpha``; all-gather and reduce-scatter half that; point-to-point ``alpha + S/B``.
  TP stays inside a node (NVLink); PP and DP cross nodes at the slowest tier they span, its
  bandwidth divided by its oversubscription.
- **Pipeline**: 1F1B takes ``(m + p - 1)`` micro-batch slots of (forward + backward) of one
  stage; interleaving by ``v`` shrinks the bubble to ``(p - 1)/v``. The DP gradient
  all-reduce after the last micro-batch is exposed (no overlap assumed).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from site_config.settings import NetworkTiers
from slurm_arnold.errors import ArnoldError
from slurm_arnold.plan.catalog import GpuSpec, ModelSpec

#: Achieved share of peak for the model's FLOPs, per GPU. a100-80g: fitted once on two rows of
#: Megatron-LM's Table 1, the smallest and the largest model (`reference.fit_efficiency`; a
#: test refits it); the other GPUs take the same share until measured on them.
EFFICIENCY = {"a100-80g": 0.538, "h100-80g": 0.538, "h200": 0.538}
BYTES_PER_VALUE = 2  # bf16 activations, weights and gradients on the wire
RECOMPUTE = ("none", "selective", "full")


@dataclass(frozen=True)
class Layout:
    """One way to run the job."""

    tp: int
    pp: int
    dp: int
    micro_batch: int = 1
    zero: int = 1
    recompute: str = "full"
    interleave: int = 1
    sequence_parallel: bool = True
    cp: int = 1
    ep: int = 1

    @property
    def gpus(self) -> int:
        """GPUs of the layout."""
        return self.tp * self.pp * self.dp * self.cp


@dataclass(frozen=True)
class Estimate:
    """What the cost model predicts for a layout."""

    step_seconds: float
    tflops_per_gpu: float
    mfu: float
    memory_gib_per_gpu: float
    fits: bool
    compute_seconds: float
    bubble_seconds: float
    tp_seconds: float
    pp_seconds: float
    dp_seconds: float
    microbatches: int

    def as_dict(self) -> dict[str, Any]:
        """The estimate's keys, rounded for JSON."""
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def model_flops(model: ModelSpec, batch: int, recompute: str = "full") -> float:
    """FLOPs of one iteration over ``batch`` sequences (SC'21 eq. 3 and its variants)."""
    s, h, layers, vocab = model.seq_len, model.hidden, model.layers, model.vocab
    head_dim = h // model.heads
    qkvo = 2 * h * h + 2 * h * model.kv * head_dim  # attention projections
    ffn = (3 if model.gated_ffn else 2) * h * model.ffn_hidden * model.top_k
    dense = 2 * batch * s * (qkvo + ffn)  # forward matmuls of one layer
    scores = 4 * batch * s * s * h  # QK^T and attention x V, forward
    logits = 2 * batch * s * h * vocab
    factor = {"none": 3, "selective": 3, "full": 4}[recompute]
    extra_scores = scores if recompute == "selective" else 0
    return float(layers * (factor * (dense + scores) + extra_scores) + 3 * logits)


def activation_bytes_per_layer(model: ModelSpec, layout: Layout) -> float:
    """Activation bytes of one layer for one micro-batch on one GPU (Korthikanti et al.)."""
    s = model.seq_len / layout.cp
    b, h, a, t = layout.micro_batch, model.hidden, model.heads, layout.tp
    if layout.recompute == "full":
        return 2 * s * b * h / (t if layout.sequence_parallel else 1)
    attention = 0.0 if layout.recompute == "selective" else 5 * a * s / h
    if layout.sequence_parallel:
        return s * b * h / t * (34 + attention)
    return s * b * h * (10 + 24 / t + attention / t)


def state_bytes_per_gpu(model: ModelSpec, layout: Layout) -> float:
    """Weights, gradients and Adam states on one GPU of the first stage (mixed precision)."""
    per_stage = model.layers / layout.pp * model.layer_params() + model.embedding_params()
    params = per_stage / layout.tp
    d = layout.dp * layout.cp
    weights, grads, optim = 2 * params, 2 * params, 12 * params
    if layout.zero >= 1:
        optim /= d
    if layout.zero >= 2:
        grads /= d
    if layout.zero >= 3:
        weights /= d
    return weights + grads + optim


def memory_bytes(model: ModelSpec, layout: Layout) -> float:
    """Peak bytes on a GPU of the first stage: states plus in-flight activations."""
    v = layout.interleave
    in_flight = model.layers * (1 + (layout.pp - 1) / (layout.pp * v) if v > 1 else 1)
    return state_bytes_per_gpu(model, layout) + in_flight * activation_bytes_per_layer(
        model, layout)


LEAF_NODES = 32  # nodes under one leaf switch when the topology does not say


def _tier(network: NetworkTiers, gpus_per_node: int, span_gpus: int,
          leaf_nodes: int = LEAF_NODES) -> tuple[float, float]:
    """(bytes/s per GPU, latency s) of the slowest tier a group of ``span_gpus`` crosses when
    laid out densely: inside a node, else a leaf, else across the core (a group bigger than a
    leaf's worth is assumed to cross the core)."""
    if span_gpus <= gpus_per_node:
        tier = network.nvlink
    elif span_gpus <= gpus_per_node * leaf_nodes:
        tier = network.leaf
    else:
        tier = network.core
    return tier.bandwidth_gbps * 1e9 / 8 / tier.oversubscription, tier.latency_us * 1e-6


def allreduce_seconds(size: float, n: int, bandwidth: float, latency: float) -> float:
    """Ring all-reduce of ``size`` bytes over ``n`` GPUs."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n * size / bandwidth + 2 * (n - 1) * latency


def estimate(model: ModelSpec, gpu: GpuSpec, network: NetworkTiers, layout: Layout,
             global_batch: int, *, gpus_per_node: int = 8,
             efficiency: float | None = None, leaf_nodes: int = LEAF_NODES) -> Estimate:
    """Predict one iteration of ``layout``; raises ``ArnoldError`` when it is not a layout of
    the job (batch or layers that do not divide)."""
    if layout.recompute not in RECOMPUTE:
        raise ArnoldError(f"--recompute {layout.recompute}: use one of {', '.join(RECOMPUTE)}")
    if model.heads % layout.tp:
        raise ArnoldError(f"TP {layout.tp} does not divide the {model.heads} heads")
    if global_batch % (layout.dp * layout.micro_batch):
        raise ArnoldError(f"global batch {global_batch} is not a multiple of DP x micro-batch "
                          f"= {layout.dp} x {layout.micro_batch}")
    if layout.pp * layout.interleave > model.layers:
        raise ArnoldError(f"{layout.pp} stages x {layout.interleave} chunks exceed the "
                          f"{model.layers} layers")
    eff = EFFICIENCY.get(gpu.name, 0.5) if efficiency is None else efficiency
    m = global_batch // (layout.dp * layout.micro_batch)
    b, s, h = layout.micro_batch, model.seq_len, model.hidden
    # Compute of one micro-batch on one stage (forward + backward, recomputation included).
    per_micro = model_flops(model, b, layout.recompute) / (layout.pp * layout.tp * layout.cp)
    stage_compute = per_micro / (eff * gpu.peak_flops)
    # TP: per layer, 2 all-reduces forward and 2 backward (+2 recomputed) of b s h values
    # (with sequence parallelism the same bytes as all-gather + reduce-scatter).
    tp_bw, tp_lat = gpu.nvlink_bytes_per_s, network.nvlink.latency_us * 1e-6
    if layout.tp > gpus_per_node:
        tp_bw, tp_lat = _tier(network, gpus_per_node, layout.tp, leaf_nodes)
    ars = 6 if layout.recompute == "full" else 4
    tp_layer = ars * allreduce_seconds(BYTES_PER_VALUE * b * s * h / layout.cp, layout.tp,
                                       tp_bw, tp_lat)
    stage_tp = tp_layer * model.layers / layout.pp
    # PP: one activation forward and one gradient backward per micro-batch and boundary.
    pp_bw, pp_lat = _tier(network, gpus_per_node, layout.tp * layout.pp * 2, leaf_nodes)
    message = BYTES_PER_VALUE * b * s * h / layout.cp / (layout.tp if layout.sequence_parallel
                                                         else 1)
    stage_pp = 2 * (pp_lat + message / pp_bw) * layout.interleave if layout.pp > 1 else 0.0
    slot = stage_compute + stage_tp + stage_pp
    bubble = (layout.pp - 1) / layout.interleave * slot
    pipeline = m * slot + bubble
    # DP: gradients of one GPU's parameters, all-reduced across replicas (reduce-scatter for
    # ZeRO-2/3, plus the parameter all-gather of ZeRO-3 twice per iteration).
    params = (model.layers / layout.pp * model.layer_params() + model.embedding_params()) \
        / layout.tp
    dp_n = layout.dp * layout.cp
    dp_bw, dp_lat = _tier(network, gpus_per_node, layout.gpus, leaf_nodes)
    grad_bytes = BYTES_PER_VALUE * params
    dp = allreduce_seconds(grad_bytes, dp_n, dp_bw, dp_lat)
    if layout.zero >= 3:
        dp += 2 * 0.5 * allreduce_seconds(grad_bytes, dp_n, dp_bw, dp_lat)
    step = pipeline + dp
    flops = model_flops(model, global_batch, "full")  # the paper's count, for TFLOP/s
    tflops = flops / step / layout.gpus / 1e12
    mem = memory_bytes(model, layout)
    return Estimate(step, tflops, model_flops(model, global_batch, layout.recompute) / step
                    / layout.gpus / gpu.peak_flops, mem / 2**30, mem <= gpu.memory_bytes,
                    m * stage_compute, bubble, m * stage_tp, m * stage_pp, dp, m)


def smallest_fitting_gpus(model: ModelSpec, gpu: GpuSpec) -> int:
    """The fewest GPUs that can hold the model's states with ZeRO-3 and full recomputation
    at micro-batch 1 (a floor for error messages)."""
    states = 16 * model.params()
    return max(1, math.ceil(states / gpu.memory_bytes))
