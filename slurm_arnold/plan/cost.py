"""The planner's cost model: FLOPs, memory and time of one training iteration of a layout.

Sources, part by part:

- **FLOPs** (Narayanan et al., SC'21, eq. 3): with full recomputation one iteration costs
  ``96 B s l h^2 (1 + s/(6h) + V/(16 l h))``: a forward pass is ``24 B s h^2 (1 + s/(6h))`` per
  layer plus ``2 B s h V`` for the logits, a backward pass twice that, recomputation one more
  forward. Without recomputation the factor is 72, with selective recomputation the attention
  score part (``s/(6h)``) is recomputed only. "Model" TFLOP/s per GPU counts what the paper
  counts (its formula, recomputation included) so it compares with its Table 1. Gated FFNs and
  grouped-query attention use the exact matrix sizes; an MoE layer computes ``top_k`` experts.
- **Compute time**, a roofline in two parts: the matrix multiplications at a share of peak
  (``EFFICIENCY``, per GPU type), plus the elementwise work (layer norms, activation, dropout,
  residual adds, and with eager attention the softmax over the scores), which is bound by
  memory bandwidth: ``ELEMENTWISE_TRAFFIC`` bytes moved per byte of the layer's activations
  (Korthikanti's ``34 + 5as/h``, without the scores' term under FlashAttention) per pass,
  at the GPU's HBM bandwidth. So the achieved share of peak depends on the shapes: small
  hidden sizes per TP rank and long eager-attention sequences spend more of their time on
  memory traffic. Both constants are stated where they are defined, with what fitted them.
- **Activation memory** per layer and micro-batch (Korthikanti et al. 2022, Table 2):
  ``s b h (34 + 5 a s / h)`` without parallelism; with TP t: ``s b h (10 + 24/t + 5 a s/(h t))``;
  with TP + sequence parallelism ``s b h / t (34 + 5 a s / h)``; selective recomputation drops
  the ``5 a s / h`` term; full recomputation keeps ``2 s b h / t`` per layer. The ``5 a s / h``
  term is the attention scores (softmax output, dropout mask and output), which FlashAttention
  (Dao et al. 2022; the default, ``attention="flash"``) never stores: it keeps only the
  per-row softmax statistics and recomputes the scores in the backward pass, so with it the
  term is dropped as under selective recomputation, and without recomputation the scores'
  FLOPs are paid once more (as selective recomputation pays them). ``attention="eager"``
  (``--attention eager``) is the paper's formula, for runs made without it (Megatron-LM's SC'21
  Table 1 predates it; recomputing everything, it is the same there either way). Under 1F1B the
  first stage holds ``p`` micro-batches of its ``l/p`` layers, i.e. ``l`` layers' worth
  (``x (1 + (p-1)/(p v))`` interleaved).
- **Weights, gradients, optimizer** (Rajbhandari et al., ZeRO): mixed-precision Adam keeps
  2 + 2 + 12 bytes per parameter; ZeRO-1 shards the 12 over DP, ZeRO-2 also the gradients,
  ZeRO-3 also the weights (at the price of all-gathering them).
- **Communication** on the alpha-beta model per level (NVLink, leaf, core; bandwidth divided
  by oversubscription): ring all-reduce ``2 (n-1)/n x S/B + 2 (n-1) alpha``; all-gather and
  reduce-scatter half that; all-to-all ``(n-1)/n x S/B + (n-1) alpha``; point-to-point
  ``alpha + S/B``. TP stays inside a node (NVLink). CP all-gathers keys and values per layer
  (ring attention); EP sends each token's top-k copies all-to-all twice per pass. Which level
  a group or a stage boundary crosses follows from the rank order (``group_levels``).
- **Pipeline** (per stage, so stages may differ): stage k's slot is its layers' forward and
  backward plus its sends; 1F1B takes ``(m - 1) x`` the slowest slot plus one pass through
  all of them (``(m + p - 1) x slot`` for equal stages); interleaving by ``v`` shrinks the
  bubble to ``(p - 1)/v`` slots. The output layer runs on the last stage. The DP gradient
  synchronisation of the slowest-to-sync stage after the last micro-batch is exposed (no
  overlap assumed).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from functools import lru_cache
from typing import Any

from site_config.settings import NetworkTiers
from slurm_arnold.errors import ArnoldError
from slurm_arnold.plan.catalog import GpuSpec, ModelSpec

#: Share of peak the matrix multiplications reach, per GPU, and the elementwise traffic
#: (bytes per activation byte per pass). a100-80g and the traffic: fitted together on the
#: even rows of Megatron-LM's SC'21 Table 1 (1.7B, 7.5B, 39.1B, 145.6B, 529.6B; A100, eager
#: attention, no sequence parallelism), checked on the odd rows (`reference.fit_roofline`; a
#: test refits both and checks the rest). h100-80g: fitted on the one H100 figure the repo
#: has, Llama 3 405B on 8,192 GPUs (430 TFLOP/s, Meta's Llama 3 paper), with the traffic kept;
#: no second H100 figure checks it. h200: the same chip as H100 with more and faster memory,
#: so H100's share.
EFFICIENCY = {"a100-80g": 0.66, "h100-80g": 0.711, "h200": 0.711}
ELEMENTWISE_TRAFFIC = 2.75
#: For a GPU the cost model has no figure for (a TOML file without ``efficiency``).
DEFAULT_EFFICIENCY = 0.5
BYTES_PER_VALUE = 2  # bf16 activations, weights and gradients on the wire
RECOMPUTE = ("none", "selective", "full")
ATTENTION = ("flash", "eager")
ORDERS = ("tp-dp-pp", "tp-pp-dp")  # rank orders the planner prices (rankorder.ORDERS names)


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
    stages: tuple[int, ...] = ()  # layers per stage, first to last; () = equal stages
    order: str = "tp-dp-pp"  # how ranks fill the machine (see group_levels)
    attention: str = "flash"  # "flash": scores never stored; "eager": stored (see above)

    @property
    def gpus(self) -> int:
        """GPUs of the layout."""
        return self.tp * self.pp * self.dp * self.cp

    def stage_layers(self, layers: int) -> tuple[int, ...]:
        """Layers per stage: the given cut, or equal stages."""
        return self.stages or (layers // self.pp,) * self.pp


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


def layer_forward_flops(model: ModelSpec, batch: int) -> tuple[float, float, float]:
    """Forward FLOPs over ``batch`` sequences: (one layer's weight matmuls, one layer's
    attention scores (QK^T and attention x V, which have no weights), the output layer)."""
    s, h = model.seq_len, model.hidden
    head_dim = h // model.heads
    qkvo = 2 * h * h + 2 * h * model.kv * head_dim  # attention projections
    ffn = (3 if model.gated_ffn else 2) * h * model.ffn_hidden * model.top_k
    return (2.0 * batch * s * (qkvo + ffn), 4.0 * batch * s * s * h,
            2.0 * batch * s * h * model.vocab)


def model_flops(model: ModelSpec, batch: int, recompute: str = "full",
                attention: str = "eager") -> float:
    """FLOPs of one iteration over ``batch`` sequences (SC'21 eq. 3 and its variants; with
    FlashAttention and no recomputation the backward recomputes the scores once)."""
    dense, scores, logits = layer_forward_flops(model, batch)
    layers = model.layers
    factor = {"none": 3, "selective": 3, "full": 4}[recompute]
    extra_scores = scores if recompute == "selective" or (
        recompute == "none" and attention == "flash") else 0
    return float(layers * (factor * (dense + scores) + extra_scores) + 3 * logits)


def passes_of(layout: Layout) -> int:
    """Passes over a layer per micro-batch: forward, backward, and a recomputed forward."""
    return 3 if layout.recompute == "full" else 2


def elementwise_seconds(model: ModelSpec, gpu: GpuSpec, layout: Layout,
                        traffic: float | None = None) -> float:
    """One pass of one layer's memory-bound work on one GPU: ``traffic`` (default
    ``ELEMENTWISE_TRAFFIC``) times the layer's activation bytes (``s b h (34 + 5as/h)``, the
    scores' term only with eager attention), split over CP, and over TP where sequence
    parallelism splits it: without it, the layer norms, dropouts and residual adds (10 of the
    34) run whole on every TP rank (Korthikanti et al., section 4.2), at HBM bandwidth."""
    s = model.seq_len / layout.cp
    b, h, a, t = layout.micro_batch, model.hidden, model.heads, layout.tp
    scores = 5 * a * s / h if layout.attention == "eager" else 0.0
    k = ELEMENTWISE_TRAFFIC if traffic is None else traffic
    per_rank = (34 + scores) / t if layout.sequence_parallel else 10 + (24 + scores) / t
    return k * s * b * h * per_rank / gpu.hbm_bytes_per_s


def recompute_elementwise_seconds(model: ModelSpec, gpu: GpuSpec, layout: Layout,
                                  traffic: float | None = None) -> float:
    """The memory-bound work selective recomputation redoes in the backward pass of one layer
    on one GPU: the attention scores' softmax and dropout (the ``5as/h`` term of
    ``elementwise_seconds``), which it recomputes with the score matrix multiplications
    (Korthikanti et al., section 5). Zero for other modes and with FlashAttention, whose
    backward recomputes its scores inside the kernel."""
    if layout.recompute != "selective" or layout.attention != "eager":
        return 0.0
    without_scores = replace(layout, attention="flash")  # the same pass minus the scores' term
    return elementwise_seconds(model, gpu, layout, traffic) \
        - elementwise_seconds(model, gpu, without_scores, traffic)


def activation_bytes_per_layer(model: ModelSpec, layout: Layout) -> float:
    """Activation bytes of one layer for one micro-batch on one GPU (Korthikanti et al.)."""
    s = model.seq_len / layout.cp
    b, h, a, t = layout.micro_batch, model.hidden, model.heads, layout.tp
    if layout.recompute == "full":
        return 2 * s * b * h / (t if layout.sequence_parallel else 1)
    attention = 0.0 if layout.recompute == "selective" or layout.attention == "flash" \
        else 5 * a * s / h
    if layout.sequence_parallel:
        return s * b * h / t * (34 + attention)
    return s * b * h * (10 + 24 / t + attention / t)


def _params_per_gpu(model: ModelSpec, layout: Layout, layers: float,
                    embedding: float) -> tuple[float, float]:
    """(dense, expert) parameters one GPU holds for ``layers`` layers plus ``embedding``
    embedding parameters: dense ones split by TP, experts by TP x EP."""
    expert = model.expert_params_per_layer() if model.experts > 1 else 0
    dense = (layers * (model.layer_params() - expert) + embedding) / layout.tp
    return dense, layers * expert / (layout.tp * layout.ep)


def _state_bytes(model: ModelSpec, layout: Layout, layers: float, embedding: float) -> float:
    """Weights, gradients and Adam states (2 + 2 + 12 bytes per parameter) on one GPU, with
    ZeRO sharding over the GPUs that replicate them (DP x CP; for experts, that / EP)."""
    dense, expert = _params_per_gpu(model, layout, layers, embedding)
    total = 0.0
    for params, d in ((dense, layout.dp * layout.cp),
                      (expert, max(1, layout.dp * layout.cp // layout.ep))):
        weights, grads, optim = 2 * params, 2 * params, 12 * params
        if layout.zero >= 1:
            optim /= d
        if layout.zero >= 2:
            grads /= d
        if layout.zero >= 3:
            weights /= d
        total += weights + grads + optim
    return total


def state_bytes_per_gpu(model: ModelSpec, layout: Layout) -> float:
    """Weights, gradients and Adam states on one GPU of the first of equal stages."""
    return _state_bytes(model, layout, model.layers / layout.pp, model.embedding_params())


LEAF_NODES = 32  # nodes under one leaf switch when the topology does not say
LEVELS = ("nvlink", "leaf", "core")  # the network levels the planner tells apart


def span_level(first: int, length: int, gpus_per_node: int, leaf_nodes: int) -> int:
    """Network level (index into ``LEVELS``) of the slowest link inside the GPU range
    ``[first, first + length)`` when a job's ranks fill nodes and leaves in order."""
    last = first + length - 1
    if first // gpus_per_node == last // gpus_per_node:
        return 0
    leaf = gpus_per_node * leaf_nodes
    return 1 if first // leaf == last // leaf else 2


def _tier(network: NetworkTiers, level: int) -> tuple[float, float]:
    """(bytes/s per GPU, latency s) of a level, its bandwidth divided by its oversubscription."""
    tier = (network.nvlink, network.leaf, network.core)[level]
    return tier.bandwidth_gbps * 1e9 / 8 / tier.oversubscription, tier.latency_us * 1e-6


@lru_cache(maxsize=65536)
def group_levels(order: str, tp: int, cp: int, pp: int, dp: int, gpus_per_node: int,
                 leaf_nodes: int) -> tuple[int, tuple[int, ...]]:
    """Where the groups of a layout land when its ranks fill the machine in ``order``:
    (level of the slowest DP group, level of each PP boundary).

    ``tp-dp-pp`` (Megatron's order): a stage's ``tp*cp*dp`` GPUs are consecutive, so DP groups
    are compact and each stage boundary spans two neighbouring blocks. ``tp-pp-dp``: a
    pipeline's ``tp*cp*pp`` GPUs are consecutive, so boundaries are short and DP groups strided.
    A boundary's level is the slowest over all pipelines (each pipeline's two blocks)."""
    t = tp * cp
    if order == "tp-dp-pp":
        block = t * dp
        dp_level = max(span_level(k * block, block, gpus_per_node, leaf_nodes)
                       for k in range(pp))
        bounds = tuple(span_level(k * block, 2 * block, gpus_per_node, leaf_nodes)
                       for k in range(pp - 1))
    else:
        pipe = t * pp
        dp_level = span_level(0, pipe * dp, gpus_per_node, leaf_nodes)
        period = gpus_per_node * leaf_nodes
        replicas = range(min(dp, period))
        bounds = tuple(max(span_level(r * pipe + k * t, 2 * t, gpus_per_node, leaf_nodes)
                           for r in replicas) for k in range(pp - 1))
    return dp_level, bounds


@dataclass(frozen=True)
class StageModel:
    """The costs of one stage as functions of its layer count ``n`` and position ``k``, for
    one micro-batch (times) or at the 1F1B peak (memory). Affine in ``n``, which is what lets
    the planner's dynamic program price any cut."""

    pp: int
    microbatches: int
    interleave: int
    layer_seconds: float  # compute + TP/CP/EP communication of one layer
    layer_compute_seconds: float
    logits_seconds: float  # the output layer, on the last stage
    boundary_seconds: tuple[float, ...]  # one message over boundary k (k -> k+1)
    layer_state_bytes: float
    layer_activation_bytes: float
    embedding_state_bytes: tuple[float, ...]  # per stage (first: input, last: output layer)
    layer_sync_seconds: float  # DP gradient traffic of one layer's parameters (bandwidth part)
    embedding_sync_seconds: tuple[float, ...]
    sync_latency_seconds: float

    def slot(self, k: int, n: int) -> float:
        """Forward + backward of one micro-batch on stage ``k`` with ``n`` layers, with its
        sends (forward to ``k+1``, gradient back to ``k-1``)."""
        t = n * self.layer_seconds + (self.logits_seconds if k == self.pp - 1 else 0.0)
        if k < self.pp - 1:
            t += self.interleave * self.boundary_seconds[k]
        if k > 0:
            t += self.interleave * self.boundary_seconds[k - 1]
        return t

    def memory(self, k: int, n: int) -> float:
        """Peak bytes on a GPU of stage ``k`` with ``n`` layers."""
        return (n * (self.layer_state_bytes + self.layer_activation_bytes
                     * in_flight(k, self.pp, self.microbatches, self.interleave))
                + self.embedding_state_bytes[k])

    def sync(self, k: int, n: int) -> float:
        """The exposed DP gradient synchronisation of stage ``k`` after its last backward."""
        return (n * self.layer_sync_seconds + self.embedding_sync_seconds[k]
                + self.sync_latency_seconds)

    def pipeline(self, stages: tuple[int, ...]) -> float:
        """1F1B over the stages: ``(m - 1) x`` the slowest slot plus one pass through all of
        them (``(m + p - 1) x slot`` when equal); interleaved: ``m x`` the slowest slot plus
        ``p - 1`` of the largest chunk (a stage of ``n`` layers in ``v`` chunks has chunks of
        ``ceil(n / v)`` layers at most), ``(m + (p - 1)/v) x slot`` when everything divides."""
        slots = [self.slot(k, n) for k, n in enumerate(stages)]
        v = self.interleave
        if v > 1:
            chunk = max(slot * math.ceil(n / v) / n for slot, n in zip(slots, stages,
                                                                         strict=True))
            return self.microbatches * max(slots) + (self.pp - 1) * chunk
        return (self.microbatches - 1) * max(slots) + sum(slots)


def _check(model: ModelSpec, layout: Layout, global_batch: int) -> None:
    if layout.recompute not in RECOMPUTE:
        raise ArnoldError(f"--recompute {layout.recompute}: use one of {', '.join(RECOMPUTE)}")
    if layout.attention not in ATTENTION:
        raise ArnoldError(f"--attention {layout.attention}: use one of {', '.join(ATTENTION)}")
    if layout.order not in ORDERS:
        raise ArnoldError(f"rank order {layout.order}: use one of {', '.join(ORDERS)}")
    if model.heads % layout.tp:
        raise ArnoldError(f"TP {layout.tp} does not divide the {model.heads} heads")
    if global_batch % (layout.dp * layout.micro_batch):
        raise ArnoldError(f"global batch {global_batch} is not a multiple of DP x micro-batch "
                          f"= {layout.dp} x {layout.micro_batch}")
    if model.seq_len % layout.cp:
        raise ArnoldError(f"CP {layout.cp} does not divide the sequence of {model.seq_len}")
    if model.experts % layout.ep or (layout.dp * layout.cp) % layout.ep:
        raise ArnoldError(f"EP {layout.ep} must divide the {model.experts} experts and "
                          f"DP x CP = {layout.dp * layout.cp}")
    if layout.pp * layout.interleave > model.layers:
        raise ArnoldError(f"{layout.pp} stages x {layout.interleave} chunks exceed the "
                          f"{model.layers} layers")


def _check_cut(model: ModelSpec, layout: Layout) -> None:
    if layout.stages:
        if len(layout.stages) != layout.pp or sum(layout.stages) != model.layers \
                or min(layout.stages) < 1:
            raise ArnoldError(f"stages {','.join(map(str, layout.stages))}: give {layout.pp} "
                              f"positive layer counts adding up to {model.layers}")
    elif model.layers % layout.pp:
        raise ArnoldError(f"{layout.pp} stages do not divide the {model.layers} layers; "
                          "give the layers per stage (--stages) or another PP")
    smallest = min(layout.stage_layers(model.layers))
    if layout.interleave > smallest:
        raise ArnoldError(f"a stage of {smallest} layers does not split into "
                          f"{layout.interleave} chunks; use --interleave {smallest} or less")


def gemm_efficiency(gpu: GpuSpec) -> float:
    """Share of peak ``gpu``'s matrix multiplications reach: the GPU file's own ``efficiency``
    (a site's measured stack), else the catalogue figure, else ``DEFAULT_EFFICIENCY``."""
    if gpu.efficiency is not None:
        return gpu.efficiency
    return EFFICIENCY.get(gpu.name, DEFAULT_EFFICIENCY)


def pp_message_bytes(model: ModelSpec, layout: Layout) -> float:
    """Bytes one GPU sends over a stage boundary per micro-batch and direction: its 1/TP
    slice of the activations, with or without sequence parallelism (without it, Megatron-LM
    scatters the replicated activations over the TP ranks' links and gathers them behind the
    boundary; SC'21 section 4.1)."""
    return BYTES_PER_VALUE * layout.micro_batch * model.seq_len * model.hidden / layout.cp \
        / layout.tp


def stage_model(model: ModelSpec, gpu: GpuSpec, network: NetworkTiers, layout: Layout,
                global_batch: int, *, gpus_per_node: int = 8,
                efficiency: float | None = None, leaf_nodes: int = LEAF_NODES,
                traffic: float | None = None) -> StageModel:
    """The per-stage cost functions of ``layout`` (its ``stages`` are ignored: any cut is
    priced by them); raises ``ArnoldError`` when the layout is not one of the job."""
    _check(model, layout, global_batch)
    eff = gemm_efficiency(gpu) if efficiency is None else efficiency
    tp, cp, ep, p = layout.tp, layout.cp, layout.ep, layout.pp
    m = global_batch // (layout.dp * layout.micro_batch)
    b, s, h = layout.micro_batch, model.seq_len, model.hidden
    speed = eff * gpu.peak_flops
    logits_flops = 6.0 * b * s * h * model.vocab  # forward and backward of the output layer
    layer_flops = (model_flops(model, b, layout.recompute, layout.attention) - logits_flops) \
        / model.layers
    layer_compute = layer_flops / (tp * cp) / speed + \
        passes_of(layout) * elementwise_seconds(model, gpu, layout, traffic) + \
        recompute_elementwise_seconds(model, gpu, layout, traffic)
    dp_level, bounds = group_levels(layout.order, tp, cp, p, layout.dp, gpus_per_node,
                                    leaf_nodes)
    passes = 3 if layout.recompute == "full" else 2  # forward, backward, recomputed forward
    # TP: per layer, 2 all-reduces in each pass of b s h values (with sequence parallelism
    # the same bytes as all-gather + reduce-scatter), on NVLink while TP fits in a node.
    if tp <= gpus_per_node:
        tp_bw, tp_lat = gpu.nvlink_bytes_per_s, network.nvlink.latency_us * 1e-6
    else:
        tp_bw, tp_lat = _tier(network, span_level(0, tp, gpus_per_node, leaf_nodes))
    layer_comm = 2 * passes * allreduce_seconds(BYTES_PER_VALUE * b * s * h / cp, tp, tp_bw,
                                                tp_lat)
    # CP (ring attention): keys and values all-gathered in each forward, their gradients
    # reduce-scattered backwards, among the CP ranks next to the TP group.
    if cp > 1:
        kv_bytes = 2 * BYTES_PER_VALUE * b * s * model.kv * (h // model.heads) / min(tp, model.kv)
        bw, lat = _tier(network, span_level(0, tp * cp, gpus_per_node, leaf_nodes))
        layer_comm += passes * ((cp - 1) / cp * kv_bytes / bw + (cp - 1) * lat)
    # EP: each MoE layer dispatches and combines its tokens' top-k copies all-to-all, in every
    # pass; the EP group is EP consecutive DP ranks.
    if ep > 1:
        tokens_bytes = BYTES_PER_VALUE * b * (s / cp) * h * model.top_k / tp
        ep_span = ep * tp * cp * (1 if layout.order == "tp-dp-pp" else p)
        bw, lat = _tier(network, span_level(0, ep_span, gpus_per_node, leaf_nodes))
        layer_comm += 2 * passes * ((ep - 1) / ep * tokens_bytes / bw + (ep - 1) * lat)
    message = pp_message_bytes(model, layout)
    links = {lv: _tier(network, lv) for lv in set(bounds)}  # few tiers, many boundaries
    # Without sequence parallelism each TP rank sends its 1/TP slice of the replicated
    # activations and the receivers all-gather them over NVLink (SC'21 section 4.1,
    # scatter/gather); with it the slices are what the next layer takes anyway.
    gather = 0.0
    if not layout.sequence_parallel and tp > 1:
        nv_bw, nv_lat = _tier(network, 0)
        gather = (tp - 1) * message / nv_bw + (tp - 1) * nv_lat
    boundary = tuple(links[lv][1] + message / links[lv][0] + gather for lv in bounds)
    embeddings = _embeddings(model, p)
    # Most stages hold no embedding: price each distinct amount once (deep pipelines have
    # dozens of stages, and the search prices thousands of layouts).
    states = {e: _state_bytes(model, layout, 0, e) for e in set(embeddings)}
    emb_states = tuple(states[e] for e in embeddings)
    # DP: gradients all-reduced across DP x CP replicas (reduce-scatter for ZeRO-2/3, the same
    # bytes), plus ZeRO-3's two parameter all-gathers; dense and expert parameters alike.
    n_dp = layout.dp * cp
    bw, lat = _tier(network, dp_level)
    ring = 2 * (n_dp - 1) / n_dp if n_dp > 1 else 0.0
    factor = ring * (2.0 if layout.zero >= 3 else 1.0)
    dense, expert = _params_per_gpu(model, layout, 1, 0)
    per_layer_sync = factor * BYTES_PER_VALUE * (dense + expert) / bw
    emb_sync = tuple(factor * BYTES_PER_VALUE * e / tp / bw for e in embeddings)
    sync_lat = (2.0 if layout.zero >= 3 else 1.0) * 2 * (n_dp - 1) * lat if n_dp > 1 else 0.0
    return StageModel(
        pp=p, microbatches=m, interleave=layout.interleave,
        layer_seconds=layer_compute + layer_comm, layer_compute_seconds=layer_compute,
        logits_seconds=logits_flops / (tp * cp) / speed, boundary_seconds=boundary,
        layer_state_bytes=_state_bytes(model, layout, 1, 0),
        layer_activation_bytes=activation_bytes_per_layer(model, layout),
        embedding_state_bytes=emb_states, layer_sync_seconds=per_layer_sync,
        embedding_sync_seconds=emb_sync, sync_latency_seconds=sync_lat)


def _embeddings(model: ModelSpec, pp: int) -> list[float]:
    """Embedding parameters per stage: the input embedding on the first, the output layer on
    the last (Megatron keeps a tied copy there; untied models have their own)."""
    out = [0.0] * pp
    out[0] += model.embedding_params()
    if pp > 1:
        out[-1] += model.vocab * model.hidden
    return out


def in_flight(k: int, pp: int, microbatches: int, interleave: int) -> float:
    """Micro-batches whose activations stage ``k`` holds at the 1F1B peak: ``p - k`` (at most
    ``m``); interleaved, ``(p - 1)/v`` more chunks' worth (Narayanan et al., SC'21)."""
    held = min(pp - k, microbatches)
    return float(held) if interleave == 1 else held + (pp - 1) / interleave


def allreduce_seconds(size: float, n: int, bandwidth: float, latency: float) -> float:
    """Ring all-reduce of ``size`` bytes over ``n`` GPUs."""
    if n <= 1:
        return 0.0
    return 2 * (n - 1) / n * size / bandwidth + 2 * (n - 1) * latency


def estimate(model: ModelSpec, gpu: GpuSpec, network: NetworkTiers, layout: Layout,
             global_batch: int, *, gpus_per_node: int = 8,
             efficiency: float | None = None, leaf_nodes: int = LEAF_NODES,
             traffic: float | None = None) -> Estimate:
    """Predict one iteration of ``layout``; raises ``ArnoldError`` when it is not a layout of
    the job (batch, layers or stages that do not add up). ``efficiency`` and ``traffic``
    override ``EFFICIENCY`` and ``ELEMENTWISE_TRAFFIC`` (for fitting them)."""
    sm = stage_model(model, gpu, network, layout, global_batch, gpus_per_node=gpus_per_node,
                     efficiency=efficiency, leaf_nodes=leaf_nodes, traffic=traffic)
    _check_cut(model, layout)
    return estimate_stages(model, gpu, layout, global_batch, sm,
                           layout.stage_layers(model.layers))


def estimate_stages(model: ModelSpec, gpu: GpuSpec, layout: Layout, global_batch: int,
                    sm: StageModel, stages: tuple[int, ...]) -> Estimate:
    """The estimate of ``layout`` cut into ``stages`` (layers per stage) on a stage model."""
    m = sm.microbatches
    pipeline = sm.pipeline(stages)
    slots = [sm.slot(k, n) for k, n in enumerate(stages)]
    worst = max(range(len(stages)), key=lambda k: slots[k])
    n = stages[worst]
    compute = m * (n * sm.layer_compute_seconds
                   + (sm.logits_seconds if worst == sm.pp - 1 else 0.0))
    pp_comm = m * (slots[worst] - n * sm.layer_seconds
                   - (sm.logits_seconds if worst == sm.pp - 1 else 0.0))
    other_comm = m * n * (sm.layer_seconds - sm.layer_compute_seconds)
    dp = max(sm.sync(k, n) for k, n in enumerate(stages))
    step = pipeline + dp
    # The FLOPs the layout executes, recomputation included: the paper's count for its runs
    # (all recomputed everything), and the same rule for a layout that recomputes less (it
    # executes fewer FLOPs, faster), so a choice of recomputation cannot inflate TFLOP/s.
    flops = model_flops(model, global_batch, layout.recompute, layout.attention)
    mem = max(sm.memory(k, n) for k, n in enumerate(stages))
    return Estimate(step, flops / step / layout.gpus / 1e12,
                    flops / step / layout.gpus / gpu.peak_flops, mem / 2**30,
                    mem <= gpu.memory_bytes,
                    compute, pipeline - m * slots[worst], other_comm, pp_comm, dp, m)


def smallest_fitting_gpus(model: ModelSpec, gpu: GpuSpec) -> int:
    """The fewest GPUs that can hold the model's states with ZeRO-3 and full recomputation
    at micro-batch 1 (a floor for error messages)."""
    states = 16 * model.params()
    return max(1, math.ceil(states / gpu.memory_bytes))


def communication_volumes(model: ModelSpec, layout: Layout,
                          global_batch: int) -> tuple[float, float, int]:
    """(DP bytes, PP bytes, micro-batches) one GPU sends per iteration in its DP group and its
    pipeline, on the cost model above: the ring all-reduce (or reduce-scatter + all-gather) of
    its stage's gradients, twice for ZeRO-3; one activation forward and one gradient backward
    per micro-batch, chunk and boundary. What ``--align auto`` weighs the spreads by."""
    _check(model, layout, global_batch)
    m = global_batch // (layout.dp * layout.micro_batch)
    n_dp = layout.dp * layout.cp
    first = max(layout.stage_layers(model.layers))
    dense, expert = _params_per_gpu(model, layout, first, model.embedding_params())
    ring = 2 * (n_dp - 1) / n_dp if n_dp > 1 else 0.0
    dp_bytes = ring * BYTES_PER_VALUE * (dense + expert) * (2 if layout.zero >= 3 else 1)
    message = pp_message_bytes(model, layout)
    pp_bytes = 2 * m * layout.interleave * message if layout.pp > 1 else 0.0
    return dp_bytes, pp_bytes, m


def block_times(model: ModelSpec, gpu: GpuSpec, network: NetworkTiers, layout: Layout,
                global_batch: int, *, gpus_per_node: int = 8,
                leaf_nodes: int = LEAF_NODES) -> dict[str, Any]:
    """What ``arnold pipeline`` needs of a layout, per stage and micro-batch: the seconds of F
    (forward), B (input gradient, with any recomputation) and W (weight gradient), the bytes of
    one PP message, and the micro-batches. From the same FLOPs and collectives as the estimate:
    B and W split the backward's 2x forward FLOPs (the attention scores have no weights, so
    their gradients are all B); each pass carries its share of the TP/CP/EP traffic, W none;
    the output layer runs on the last stage."""
    sm = stage_model(model, gpu, network, layout, global_batch, gpus_per_node=gpus_per_node,
                     leaf_nodes=leaf_nodes)
    _check_cut(model, layout)
    dense, scores, logits = layer_forward_flops(model, layout.micro_batch)
    share = 1.0 / (layout.tp * layout.cp * gemm_efficiency(gpu) * gpu.peak_flops)
    redo = {"none": scores if layout.attention == "flash" else 0.0, "selective": scores,
            "full": dense + scores}[layout.recompute]
    passes = 3 if layout.recompute == "full" else 2
    comm = (sm.layer_seconds - sm.layer_compute_seconds) / passes  # one pass's collectives
    memory = elementwise_seconds(model, gpu, layout)  # one pass's memory-bound work
    f_layer = (dense + scores) * share + comm + memory
    b_layer = (dense + 2 * scores + redo) * share + (comm + memory) * (passes - 1) \
        + recompute_elementwise_seconds(model, gpu, layout)
    w_layer = dense * share
    cut = layout.stage_layers(model.layers)
    last = len(cut) - 1
    out: dict[str, list[float]] = {"tf": [], "tb": [], "tw": []}
    for k, n in enumerate(cut):
        extra = logits * share if k == last else 0.0
        out["tf"].append(n * f_layer + extra)
        out["tb"].append(n * b_layer + extra)
        out["tw"].append(n * w_layer + extra)
    message = pp_message_bytes(model, layout)
    return out | {"message_bytes": message, "microbatches": sm.microbatches}
