"""CrossPipe's greedy delay-aware schedule generator.

It builds the schedule while simulating it, so it sees when each message will arrive. Each
step takes the stage that can start a block earliest (ties: the lower stage) and picks that
stage's block by phase:

- **warm-up** (no input gradient has reached the stage yet): F while memory allows;
- **steady state**: alternate, B after an F and F after a B, whichever has arrived;
- **tear-down** (every F done): B before W;
- **W** when memory blocks F and no B is there, or when nothing else has arrived yet: the
  stage fills the wait for a delayed message with weight gradients instead of idling.

One choice the rule leaves open matters on some instances: in the steady state, alternate F
and B, or take B whenever one is there (which frees memory and the upstream stage sooner). The
generator builds both, one pass each, and keeps the faster.

F, B and W of micro-batches run in increasing micro-batch order on each stage (and chunk).
Memory never exceeds the limit: an F that would is not a candidate.
"""

from __future__ import annotations

import heapq

from slurm_arnold.errors import ArnoldError
from slurm_arnold.pipeline.model import Block, PipelineModel
from slurm_arnold.pipeline.simulate import Schedule, send

EPS = 1e-9


def greedy(model: PipelineModel, mem_limit: float | None = None) -> Schedule:
    """The greedy schedule under ``mem_limit`` (default: the model's, else 1F1B's peak of
    ``p`` micro-batches)."""
    limit = mem_limit if mem_limit is not None else (
        model.mem_limit if model.mem_limit is not None else model.stages * model.mem_b)
    if limit + EPS < model.mem_b / model.chunks:
        raise ArnoldError(f"--mem-limit {limit:g} is below one forward's activations "
                          f"({model.mem_b / model.chunks:g}); nothing can run")
    runs = [greedy_once(model, limit, b_first) for b_first in (False, True)]
    return min(runs, key=lambda run: run[0])[1]


def greedy_once(model: PipelineModel, limit: float,
                b_first: bool = False) -> tuple[float, Schedule]:
    """One pass of the greedy: (makespan, schedule). ``b_first``: in the steady state, B
    whenever one is there instead of alternating."""
    p, m, v = model.stages, model.microbatches, model.chunks
    total = 3 * m * v
    order: Schedule = [[] for _ in range(p)]
    free = [0.0] * p
    memory = [0.0] * p
    next_f = [[0] * v for _ in range(p)]  # per stage and chunk: the next micro-batch to run
    next_b = [[0] * v for _ in range(p)]
    pending_w: list[list[Block]] = [[] for _ in range(p)]
    last_kind = [""] * p
    seen_b = [False] * p
    arrival: dict[tuple[int, Block], float] = {}
    link_free: dict[tuple[int, str], float] = {}
    done = 0

    # A stage's choice changes only when it runs a block or a message reaches it: a heap of
    # the stages' choices, (start rounded, stage) first, stale entries skipped by version.
    version = [0] * p
    heap: list[tuple[float, int, int, float, Block]] = []

    def pick(s: int) -> None:
        version[s] += 1
        choice = _choose(model, s, free[s], memory[s], limit, next_f[s], next_b[s],
                         pending_w[s], last_kind[s], seen_b[s], arrival, b_first)
        if choice is not None:
            heapq.heappush(heap, (round(choice[0], 9), s, version[s], choice[0], choice[1]))

    for s in range(p):
        pick(s)
    while done < p * total:
        while heap and heap[0][2] != version[heap[0][1]]:
            heapq.heappop(heap)
        if not heap:
            raise ArnoldError(f"the greedy schedule is stuck under --mem-limit {limit:g}; "
                              "raise the limit")
        _, s, _, start, block = heapq.heappop(heap)
        end = start + model.duration(block)
        order[s].append(block)
        free[s] = end
        memory[s] += model.memory_delta(block)
        last_kind[s] = block.kind
        if block.kind == "F":
            next_f[s][block.chunk] += 1
        elif block.kind == "B":
            next_b[s][block.chunk] += 1
            seen_b[s] = True
            pending_w[s].append(Block("W", block.mb, block.chunk))
        else:
            pending_w[s].pop(0)  # the oldest, the one _choose offers
        reached = _deliver(model, s, block, end, arrival, link_free)
        done += 1
        pick(s)
        if reached is not None and reached != s:
            pick(reached)
    return max(free), order


def _choose(model: PipelineModel, s: int, free: float, memory: float, limit: float,
            next_f: list[int], next_b: list[int], pending_w: list[Block], last_kind: str,
            seen_b: bool, arrival: dict[tuple[int, Block], float], b_first: bool = False
            ) -> tuple[float, Block] | None:
    """The block stage ``s`` would run next and when it could start, or None (nothing can)."""
    m = model.microbatches
    fs: list[tuple[float, Block]] = []
    bs: list[tuple[float, Block]] = []
    for c in range(model.chunks):
        if next_f[c] < m:
            f = Block("F", next_f[c], c)
            ready = _ready(model, s, f, arrival)
            if ready is not None and memory + model.memory_delta(f) <= limit + EPS:
                fs.append((max(free, ready), f))
        if next_b[c] < next_f[c]:
            b = Block("B", next_b[c], c)
            ready = _ready(model, s, b, arrival)
            if ready is not None:
                bs.append((max(free, ready), b))
    w = (free, pending_w[0]) if pending_w else None
    first_f = min(fs, default=None)
    first_b = min(bs, default=None)
    now_f = first_f if first_f is not None and first_f[0] <= free + EPS else None
    now_b = first_b if first_b is not None and first_b[0] <= free + EPS else None
    all_f_done = all(n >= m for n in next_f)
    if now_b is not None and (b_first or all_f_done or last_kind == "F" or now_f is None):
        return now_b
    if now_f is not None and (not seen_b or last_kind != "F" or now_b is None):
        return now_f
    if now_b is not None:
        return now_b
    later = [x for x in (first_f, first_b) if x is not None]
    soon = min(later, key=lambda x: (x[0], x[1].kind != "B")) if later else None
    if w is not None:
        return w  # nothing has arrived: fill the wait with a weight gradient
    return soon


def _ready(model: PipelineModel, s: int, block: Block,
           arrival: dict[tuple[int, Block], float]) -> float | None:
    """When a block's input is there (0 if it needs none), None if not yet sent."""
    v = model.virtual(s, block.chunk)
    if (block.kind == "F" and v == 0) or (block.kind == "B"
                                          and v == model.stages * model.chunks - 1):
        return 0.0  # the pipeline's first forward and last backward wait for no message
    return arrival.get((s, block))


def _deliver(model: PipelineModel, stage: int, block: Block, end: float,
             arrival: dict[tuple[int, Block], float],
             link_free: dict[tuple[int, str], float]) -> int | None:
    """Send what a block produces (the simulator's link model); returns the stage it reaches."""
    message = send(model, stage, block, end, link_free)
    if message is None:
        return None
    s2, waiting, at, _ = message
    arrival[(s2, waiting)] = at
    return s2
