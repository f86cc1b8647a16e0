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
    limit = model.limit if mem_limit is None else mem_limit
    if limit + EPS < model.mem_b / model.sub_blocks:
        raise ArnoldError(f"--mem-limit {limit:g} is below one forward's activations through "
                          f"every chunk ({model.mem_b / model.sub_blocks:g}); nothing can run")
    runs = [greedy_once(model, limit, b_first) for b_first in (False, True)]
    return min(runs, key=lambda run: run[0])[1]


def greedy_once(model: PipelineModel, limit: float,
                b_first: bool = False) -> tuple[float, Schedule]:
    """One pass of the greedy: (makespan, schedule). ``b_first``: in the steady state, B
    whenever one is there instead of alternating."""
    p, m, v, n = model.stages, model.microbatches, model.chunks, model.sub_blocks
    mn, last_virtual = m * n, p * v - 1
    virtual = [[model.virtual(s, c) for c in range(v)] for s in range(p)]
    duration = [{k: model.duration(Block(k, 0), s) for k in "FBW"} for s in range(p)]
    delta = {k: model.memory_delta(Block(k, 0)) for k in "FBW"}
    # An F part of chunk c fits while memory stays at most room[c]: deeper chunks keep room
    # for one F part each, or a stage full of first-chunk forwards could never let a
    # micro-batch reach the end of the pipeline and start freeing memory.
    room = [limit + EPS - delta["F"] * (v - c) for c in range(v)]
    order: Schedule = [[] for _ in range(p)]
    free = [0.0] * p
    memory = [0.0] * p
    # Per stage and chunk, F and B parts run so far (micro-batch = count // n, part = % n).
    next_f = [[0] * v for _ in range(p)]
    next_b = [[0] * v for _ in range(p)]
    pending_w: list[list[Block]] = [[] for _ in range(p)]  # W of finished B's, oldest first
    w_part = [0] * p  # parts of the oldest pending W run so far
    f_left = [mn * v] * p  # F parts still to run
    last_kind = [""] * p
    seen_b = [False] * p
    arrival: dict[tuple[int, Block], float] = {}
    link_free: dict[tuple[int, str], float] = {}

    def ready(s: int, block: Block, first: bool) -> float | None:
        """When a block's input is there, None if not yet sent."""
        if block.part or first:
            return 0.0  # a later part had it with its first; the pipeline's ends need none
        return arrival.get((s, block))

    def choose(s: int) -> tuple[float, Block] | None:
        """The block stage ``s`` would run next and when it could start, or None."""
        at = free[s]
        first_f: tuple[float, Block] | None = None
        first_b: tuple[float, Block] | None = None
        for c in range(v):
            nf, nb = next_f[s][c], next_b[s][c]
            if nf < mn and memory[s] <= room[c]:
                f = Block("F", nf // n, c, nf % n)
                t = ready(s, f, virtual[s][c] == 0)
                if t is not None and (first_f is None or (max(at, t), f) < first_f):
                    first_f = (max(at, t), f)
            if nb // n < nf // n:  # its F has run to the end
                b = Block("B", nb // n, c, nb % n)
                t = ready(s, b, virtual[s][c] == last_virtual)
                if t is not None and (first_b is None or (max(at, t), b) < first_b):
                    first_b = (max(at, t), b)
        now_f = first_f if first_f is not None and first_f[0] <= at + EPS else None
        now_b = first_b if first_b is not None and first_b[0] <= at + EPS else None
        if now_b is not None and (b_first or last_kind[s] == "F" or now_f is None
                                  or f_left[s] == 0):
            return now_b
        if now_f is not None and (not seen_b[s] or last_kind[s] != "F" or now_b is None):
            return now_f
        if now_b is not None:
            return now_b
        if pending_w[s]:  # nothing has arrived: fill the wait with a weight gradient
            head = pending_w[s][0]
            return at, Block("W", head.mb, head.chunk, w_part[s])
        if first_f is None or (first_b is not None and first_b[0] <= first_f[0]):
            return first_b
        return first_f

    # A stage's choice changes only when it runs a block or a message reaches it: a heap of
    # the stages' choices, (start rounded, stage) first, stale entries skipped by version.
    version = [0] * p
    heap: list[tuple[float, int, int, float, Block]] = []

    def pick(s: int) -> None:
        version[s] += 1
        choice = choose(s)
        if choice is not None:
            heapq.heappush(heap, (round(choice[0], 9), s, version[s], choice[0], choice[1]))

    for s in range(p):
        pick(s)
    for _ in range(3 * mn * v * p):
        while heap and heap[0][2] != version[heap[0][1]]:
            heapq.heappop(heap)
        if not heap:
            raise ArnoldError(f"the greedy schedule is stuck under --mem-limit {limit:g}; "
                              "raise the limit")
        _, s, _, start, block = heapq.heappop(heap)
        kind = block.kind
        end = start + duration[s][kind]
        order[s].append(block)
        free[s] = end
        memory[s] += delta[kind]
        last_kind[s] = kind
        if kind == "F":
            next_f[s][block.chunk] += 1
            f_left[s] -= 1
        elif kind == "B":
            next_b[s][block.chunk] += 1
            seen_b[s] = True
            if block.part == n - 1:
                pending_w[s].append(Block("W", block.mb, block.chunk))
        else:  # the oldest pending W, the one choose offers
            w_part[s] += 1
            if w_part[s] == n:
                pending_w[s].pop(0)
                w_part[s] = 0
        reached = _deliver(model, s, block, end, arrival, link_free)
        pick(s)
        if reached is not None and reached != s:
            pick(reached)
    return max(free), order


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
