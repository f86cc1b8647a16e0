"""The static schedules: 1F1B, interleaved 1F1B, ZB-H1 and ZB-H2.

Each is a fixed order of blocks per stage, made without looking at the links (that is what
makes them static); the simulator then runs them under the links' delays.

- **1F1B** (Narayanan et al., PipeDream-Flush): stage ``s`` runs ``p - 1 - s`` forwards, then
  alternates one forward and one backward (B then W at once), then drains the backwards.
  Peak memory ``p - s`` micro-batches.
- **Interleaved 1F1B** (Narayanan et al., SC'21): the same with ``v`` chunks per stage,
  forwards taken ``p`` micro-batches per chunk at a time, Megatron's warm-up of
  ``2 (p - 1 - s) + (v - 1) p`` chunk-forwards; needs ``m`` a multiple of ``p``.
- **ZB-H1** (Qi et al., zero-bubble pipeline parallelism): 1F1B's forwards and input-gradient
  backwards, with stage ``s`` running its W passes ``s`` micro-batches late, and the last ones
  in the drain where the stage would otherwise wait. Peak memory at most 1F1B's.
- **ZB-H2**: ``2 (p - 1 - s) + 1`` forwards (peak ``2p - 1`` on the first stage), then B, W,
  F with stage ``s``'s W passes ``2s`` micro-batches late and the late ones at the end. Its
  bubble is ``(p - 1)(T_F + T_B - 2 T_W)`` where that is at least ``(p - 1) T_F``, the time
  before the last stage can start at all; below that (e.g. equal times, where the paper shows
  no bubble) the paper counts back-to-back iterations with the optimizer step moved out of the
  way, which one iteration cannot show, and the makespan has ``(p - 1) T_F`` of bubble.
"""

from __future__ import annotations

from collections.abc import Callable

from slurm_arnold.errors import ArnoldError
from slurm_arnold.pipeline.model import Block, PipelineModel
from slurm_arnold.pipeline.simulate import Schedule


def one_f_one_b(model: PipelineModel) -> Schedule:
    """1F1B (W right after its B)."""
    return _late_w(model, "1f1b", lambda s: 0)


def interleaved(model: PipelineModel) -> Schedule:
    """Interleaved 1F1B with ``model.chunks`` chunks per stage (Megatron's order)."""
    _whole_blocks(model, "i1f1b")
    p, m, v = model.stages, model.microbatches, model.chunks
    if v < 2:
        raise ArnoldError("i1f1b needs --chunks 2 or more (1 chunk is plain 1f1b)")
    if m % p:
        raise ArnoldError(f"i1f1b needs --microbatches a multiple of --stages ({m} is not a "
                          f"multiple of {p}), as Megatron does")
    total = m * v

    def forward(k: int) -> Block:
        group, within = divmod(k, p * v)
        return Block("F", group * p + within % p, within // p)

    def backward(k: int) -> Block:
        group, within = divmod(k, p * v)
        return Block("B", group * p + within % p, v - 1 - within // p)

    out = []
    for s in range(p):
        warm = min(2 * (p - 1 - s) + (v - 1) * p, total)
        order = [forward(k) for k in range(warm)]
        for k in range(total - warm):
            b = backward(k)
            order += [forward(warm + k), b, Block("W", b.mb, b.chunk)]
        for k in range(total - warm, total):
            b = backward(k)
            order += [b, Block("W", b.mb, b.chunk)]
        out.append(order)
    return out


def zb_h1(model: PipelineModel) -> Schedule:
    """ZB-H1: 1F1B's F and B order, stage ``s``'s W passes ``s`` micro-batches late."""
    return _late_w(model, "zbh1", lambda s: s)


def _late_w(model: PipelineModel, name: str, lag: Callable[[int], int]) -> Schedule:
    """1F1B's forwards and input gradients (``p - 1 - s`` forwards first, then one forward
    per backward), with stage ``s``'s W passes ``lag(s)`` micro-batches late and the late ones
    at the end."""
    _one_chunk(model, name)
    p, m = model.stages, model.microbatches
    out = []
    for s in range(p):
        warm, late = min(p - 1 - s, m), min(lag(s), m)
        order = [Block("F", j) for j in range(warm)]
        for j in range(m):
            if warm + j < m:
                order.append(Block("F", warm + j))
            order.append(Block("B", j))
            if j >= late:
                order.append(Block("W", j - late))
        order += [Block("W", j) for j in range(m - late, m)]
        out.append(order)
    return out


def zb_h2(model: PipelineModel) -> Schedule:
    """ZB-H2: ``2 (p - 1 - s) + 1`` forwards, then B, W, F with stage ``s``'s W passes ``2s``
    micro-batches late, the late ones at the end."""
    _one_chunk(model, "zbh2")
    p, m = model.stages, model.microbatches
    out = []
    for s in range(p):
        warm = min(2 * (p - 1 - s) + 1, m)
        lag = min(2 * s, m)
        order = [Block("F", j) for j in range(warm)]
        for j in range(m):
            order.append(Block("B", j))
            if j >= lag:
                order.append(Block("W", j - lag))
            if warm + j < m:
                order.append(Block("F", warm + j))
        order += [Block("W", j) for j in range(m - lag, m)]
        out.append(order)
    return out


def _whole_blocks(model: PipelineModel, name: str) -> None:
    if model.sub_blocks != 1:
        raise ArnoldError(f"{name} runs whole blocks; sub-blocks are for the greedy")


def _one_chunk(model: PipelineModel, name: str) -> None:
    _whole_blocks(model, name)
    if model.chunks != 1:
        raise ArnoldError(f"{name} runs one chunk per stage; drop --chunks (or use i1f1b)")


STATIC = {"1f1b": one_f_one_b, "i1f1b": interleaved, "zbh1": zb_h1, "zbh2": zb_h2}
#: Schedules whose backward is one pass (B and W together, the gradient sent after both).
FUSED = frozenset({"1f1b", "i1f1b"})
