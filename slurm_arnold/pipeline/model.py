"""The pipeline model CrossPipe schedules against: stages, blocks, links and memory.

A training iteration is ``m`` micro-batches through ``p`` stages. Each stage runs, for each
micro-batch and each of its ``v`` model chunks, three compute blocks (Qi et al., zero-bubble
pipeline parallelism): **F** (forward), **B** (gradient of the input, which the previous stage
waits for) and **W** (gradient of the weights, which nobody waits for). With ``v`` chunks the
model is cut into ``p * v`` virtual stages; virtual stage ``c * p + s`` is chunk ``c`` of stage
``s`` (Megatron's interleaving), so a chunk's blocks take ``1/v`` of the stage's times.

Links: stage ``i`` and ``i + 1`` are joined by boundary ``i``, one link per direction; with
chunks in a loop, boundary ``p - 1`` is the wrap-around from the last stage back to the first.
V-shaped chunks (ZBV's placement) need no wrap-around: every other chunk runs from the last
stage back to the first, so its activations travel the links downwards. A message over a link
that pays (``cross``) occupies it for ``bandwidth_time`` (size over bandwidth; messages on one
link and direction queue) and arrives ``latency`` after it leaves the link: the alpha-beta
model with per-link occupancy. Links that do not pay deliver at once.

Memory, in units of one micro-batch's activations of a whole stage: F adds ``mem_b`` (split over
chunks), B frees what W does not need (``mem_b - mem_w``), W frees the rest (``mem_w``).

Sub-blocks (CrossPipe's refinement, for the greedy): each block is cut into ``sub_blocks``
equal parts run in order, which other blocks may come between; memory moves part by part and a
block's message leaves when its last part ends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from slurm_arnold.errors import ArnoldError

KINDS = ("F", "B", "W")
SHAPES = ("loop", "v")


class Block(NamedTuple):
    """One compute block: kind (F, B or W), micro-batch, chunk, and part (with sub-blocks)."""

    kind: str
    mb: int
    chunk: int = 0
    part: int = 0

    def label(self) -> str:
        """``F3``; with chunks ``F3.1``; a later sub-block ``F3:1``."""
        return (f"{self.kind}{self.mb}" + (f".{self.chunk}" if self.chunk else "")
                + (f":{self.part}" if self.part else ""))


@dataclass(frozen=True)
class PipelineModel:
    """Times, memory and links of one pipeline (times per stage and micro-batch)."""

    stages: int
    microbatches: int
    t_f: float | tuple[float, ...] = 1.0  # one value, or one per stage
    t_b: float | tuple[float, ...] = 1.0
    t_w: float | tuple[float, ...] = 1.0
    chunks: int = 1
    mem_b: float = 1.0
    mem_w: float = 0.5
    mem_limit: float | None = None
    latency: float = 0.0
    bandwidth_time: float = 0.0
    cross_links: frozenset[int] = field(default_factory=frozenset)
    sub_blocks: int = 1
    chunk_shape: str = "loop"  # "loop" (Megatron's interleaving) or "v" (ZBV's)

    def __post_init__(self) -> None:
        if min(self.stages, self.microbatches, self.chunks, self.sub_blocks) < 1:
            raise ArnoldError("--stages, --microbatches, --chunks and --sub-blocks must be at "
                              "least 1")
        for name in ("t_f", "t_b", "t_w"):
            value = getattr(self, name)
            per_stage = tuple(value) if isinstance(value, tuple) else (value,) * self.stages
            if len(per_stage) != self.stages:
                raise ArnoldError(f"--{name.replace('_', '')}: give one time or one per stage "
                                  f"({self.stages}), not {len(per_stage)}")
            object.__setattr__(self, name, tuple(float(t) for t in per_stage))
        if min(self.times("F") + self.times("B")) <= 0 or min(self.times("W")) < 0:
            raise ArnoldError("--tf and --tb must be positive and --tw not negative")
        if min(self.latency, self.bandwidth_time) < 0:
            raise ArnoldError("--latency and --bandwidth-time must not be negative")
        if not 0 <= self.mem_w <= self.mem_b:
            raise ArnoldError("--mem-w must be between 0 and --mem-b (W keeps part of what F "
                              "stored)")
        if self.chunk_shape not in SHAPES:
            raise ArnoldError(f"--chunk-shape {self.chunk_shape}: use one of {', '.join(SHAPES)}")
        # Two stages share one link both ways, so only a longer loop has a wrap-around link.
        wraps = self.chunks > 1 and self.chunk_shape == "loop" and self.stages > 2
        links = self.stages if wraps else self.stages - 1
        bad = sorted(i for i in self.cross_links if not 0 <= i < links)
        if bad:
            raise ArnoldError(f"--cross-links {','.join(map(str, bad))}: boundaries are 0.."
                              f"{links - 1} (link i joins stage i and i + 1"
                              + (f"; {self.stages - 1} is the wrap-around)" if wraps else ")"))

    def times(self, kind: str) -> tuple[float, ...]:
        """A kind's time on each stage, for one micro-batch."""
        value = {"F": self.t_f, "B": self.t_b, "W": self.t_w}[kind]
        assert isinstance(value, tuple)  # made so in __post_init__
        return value

    def duration(self, block: Block, stage: int) -> float:
        """How long a block runs on a stage (a chunk's, and a sub-block's, share of the
        stage's time)."""
        return self.times(block.kind)[stage] / (self.chunks * self.sub_blocks)

    def memory_delta(self, block: Block) -> float:
        """What a block adds to its stage's memory (negative: frees)."""
        per_chunk = 1 / (self.chunks * self.sub_blocks)
        if block.kind == "F":
            return self.mem_b * per_chunk
        if block.kind == "B":
            return -(self.mem_b - self.mem_w) * per_chunk
        return -self.mem_w * per_chunk

    def virtual(self, stage: int, chunk: int) -> int:
        """The virtual stage of a chunk on a stage: chunks go round the stages (loop) or,
        V-shaped, every other chunk comes back from the last stage to the first."""
        if self.chunk_shape == "v" and chunk % 2:
            return chunk * self.stages + self.stages - 1 - stage
        return chunk * self.stages + stage

    def place(self, virtual: int) -> tuple[int, int]:
        """(stage, chunk) of a virtual stage."""
        chunk, offset = divmod(virtual, self.stages)
        if self.chunk_shape == "v" and chunk % 2:
            return self.stages - 1 - offset, chunk
        return offset, chunk

    def boundary(self, a: int, b: int) -> int:
        """The link between stages ``a`` and ``b`` (-1: the same stage; ``p - 1``: the loop's
        wrap-around from the last stage to the first)."""
        if a == b:
            return -1
        if abs(a - b) == 1:
            return min(a, b)
        return self.stages - 1

    def link_cost(self, boundary: int) -> tuple[float, float]:
        """(occupancy, latency) of a message over a boundary."""
        if boundary in self.cross_links:
            return self.bandwidth_time, self.latency
        return 0.0, 0.0

    def work(self, stage: int = 0) -> float:
        """Compute time of a stage over the iteration: m (T_F + T_B + T_W)."""
        return self.microbatches * sum(self.times(k)[stage] for k in KINDS)

    def blocks(self, stage: int) -> list[Block]:
        """Every block a stage runs, in no particular order."""
        del stage  # every stage runs the same blocks
        return [Block(k, j, c, q) for c in range(self.chunks) for j in range(self.microbatches)
                for k in KINDS for q in range(self.sub_blocks)]

    @property
    def limit(self) -> float:
        """The memory limit the delay-aware schedules keep: ``mem_limit``, else 1F1B's peak
        (``p`` micro-batches)."""
        return self.mem_limit if self.mem_limit is not None else self.stages * self.mem_b

    @property
    def last_part(self) -> int:
        """The part of a block whose end sends its message."""
        return self.sub_blocks - 1


def dependency(model: PipelineModel, stage: int, block: Block) -> tuple[int, Block, int] | None:
    """The block of the neighbouring virtual stage this one waits for, as (its stage, the block,
    the boundary the message crosses: -1 when both are on this stage), or None: W waits only for
    its own B, the first virtual stage's F for nothing, the last one's B for its own F, and a
    later sub-block for the one before it. The message leaves at the end of the last part."""
    if block.kind == "W" or block.part:
        return None
    v = model.virtual(stage, block.chunk)
    if block.kind == "F":
        if v == 0:
            return None
        s, c = model.place(v - 1)
        return s, Block("F", block.mb, c, model.last_part), model.boundary(s, stage)
    if v == model.stages * model.chunks - 1:
        return None
    s, c = model.place(v + 1)
    return s, Block("B", block.mb, c, model.last_part), model.boundary(s, stage)


def local_dependency(model: PipelineModel, block: Block) -> Block | None:
    """The block on the same stage this one needs first: the sub-block before it; B its F,
    W its B (their last parts)."""
    if block.part:
        return block._replace(part=block.part - 1)
    if block.kind == "B":
        return Block("F", block.mb, block.chunk, model.last_part)
    if block.kind == "W":
        return Block("B", block.mb, block.chunk, model.last_part)
    return None
