"""Execute a pipeline schedule under the model: times, bubbles, memory and the critical path.

A schedule is, per stage, the order in which it runs its blocks. Each block starts as soon as
its stage has finished the block before it and its input has arrived: the previous virtual
stage's F (for F) or the next one's B (for B), sent when that block ends, queued on the link
behind earlier messages (each holds the link for ``bandwidth_time``) and delivered ``latency``
after it leaves. W needs only its own B, which runs earlier on the same stage. A schedule whose
stage waits for a block that can never run is refused, naming the wait.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from slurm_arnold.errors import ArnoldError
from slurm_arnold.pipeline.model import Block, PipelineModel, dependency, local_dependency

Schedule = list[list[Block]]


@dataclass(frozen=True)
class Step:
    """One block of the critical path and why it started when it did."""

    stage: int
    block: Block
    start: float
    end: float
    via: str

    def as_json(self) -> dict[str, Any]:
        """The step as JSON."""
        return {"stage": self.stage, "block": self.block.label(), "start": round(self.start, 6),
                "end": round(self.end, 6), "via": self.via}


@dataclass(frozen=True)
class Result:
    """What a schedule does under the model: the bubble rate of a stage is ``(makespan -
    m (T_F + T_B + T_W)) / makespan``; ``bubble_rate`` is the stages' mean (with equal times,
    every stage's)."""

    makespan: float
    bubble_rate: float
    peak_memory: list[float]
    times: dict[tuple[int, Block], tuple[float, float]]
    critical_path: list[Step]
    bubble_per_stage: list[float]

    def summary(self) -> dict[str, Any]:
        """makespan, bubble_rate (the stages' mean), its value per stage and peak_memory,
        rounded for JSON."""
        return {"makespan": round(self.makespan, 6), "bubble_rate": round(self.bubble_rate, 6),
                "bubble_rate_per_stage": [round(x, 6) for x in self.bubble_per_stage],
                "peak_memory": [round(x, 6) for x in self.peak_memory]}


def check(model: PipelineModel, schedule: Schedule) -> list[float]:
    """Refuse a schedule that is not one of the model (a block missing, twice, or before the
    block it needs on its own stage, or over the memory limit); returns the peak memory of each
    stage."""
    if len(schedule) != model.stages:
        raise ArnoldError(f"the schedule has {len(schedule)} stages, the model {model.stages}")
    peaks = []
    for s, order in enumerate(schedule):
        expected = set(model.blocks(s))
        if len(order) != len(expected) or set(order) != expected:
            missing = sorted(b.label() for b in expected - set(order))
            raise ArnoldError(f"stage {s} does not run every block exactly once"
                              + (f" (missing {', '.join(missing[:5])})" if missing else ""))
        seen: set[Block] = set()
        memory = peak = 0.0
        for block in order:
            need = local_dependency(model, block)
            if need is not None and need not in seen:
                raise ArnoldError(f"stage {s} runs {block.label()} before {need.label()}")
            seen.add(block)
            memory += model.memory_delta(block)
            peak = max(peak, memory)
        if model.mem_limit is not None and peak > model.mem_limit + 1e-9:
            raise ArnoldError(f"stage {s} holds {peak:g} micro-batches of activations, over "
                              f"--mem-limit {model.mem_limit:g}; raise the limit or use a "
                              "schedule made for it (greedy, optimal)")
        peaks.append(peak)
    return peaks


def simulate(model: PipelineModel, schedule: Schedule, *, fused_backward: bool = False) -> Result:
    """Run ``schedule`` on ``model``; raises ``ArnoldError`` if it is not a valid one.

    ``fused_backward``: a B directly followed by its own W is one backward pass that sends its
    gradient when both are done (classic 1F1B, where autograd computes both together)."""
    peaks = check(model, schedule)
    p = model.stages
    times: dict[tuple[int, Block], tuple[float, float]] = {}
    why: dict[tuple[int, Block], tuple[str, tuple[int, Block] | None]] = {}
    arrival: dict[tuple[int, Block], tuple[float, str]] = {}
    link_free: dict[tuple[int, str], float] = {}
    waiting: dict[tuple[int, Block], int] = {}
    pointer = [0] * p
    free = [0.0] * p
    work = list(range(p))
    held: Block | None = None
    while work:
        s = work.pop()
        order = schedule[s]
        held = None
        while pointer[s] < len(order):
            block = order[pointer[s]]
            dep = dependency(model, s, block)
            start, reason = free[s], ("stage order", (s, order[pointer[s] - 1])
                                      if pointer[s] else None)
            if dep is not None:
                key = (s, block)
                if key not in arrival:
                    waiting[(dep[0], dep[1])] = s
                    break
                at, how = arrival[key]
                if at > start:
                    start, reason = at, (how, (dep[0], dep[1]))
            end = start + model.duration(block, s)
            times[(s, block)] = (start, end)
            why[(s, block)] = reason
            free[s] = end
            pointer[s] += 1
            if fused_backward and block.kind == "B" and pointer[s] < len(order) \
                    and order[pointer[s]] == Block("W", block.mb, block.chunk, block.part):
                held = block  # sent when its W ends
            else:
                if fused_backward and block.kind == "W" and held is not None:
                    _send(model, s, held, end, arrival, link_free)
                    woken = waiting.pop((s, held), None)
                    if woken is not None:
                        work.append(woken)
                held = None
                _send(model, s, block, end, arrival, link_free)
            woken = waiting.pop((s, block), None)
            if woken is not None:
                work.append(woken)
    stuck = [s for s in range(p) if pointer[s] < len(schedule[s])]
    if stuck:
        s = stuck[0]
        block = schedule[s][pointer[s]]
        dep = dependency(model, s, block)
        assert dep is not None
        raise ArnoldError(f"the schedule deadlocks: stage {s} waits for {dep[1].label()} of "
                          f"stage {dep[0]} before {block.label()}, which never comes")
    makespan = max(end for _, end in times.values())
    per_stage = [(makespan - model.work(s)) / makespan for s in range(p)]
    return Result(makespan, sum(per_stage) / p, peaks, times, _critical_path(times, why),
                  per_stage)


def send(model: PipelineModel, stage: int, block: Block, end: float,
         link_free: dict[tuple[int, str], float]) -> tuple[int, Block, float, str] | None:
    """The message a finished F or B sends to the next (previous) virtual stage, queued on its
    link: (stage it reaches, block that waits for it, arrival time, how it travelled), or None
    (W, and the pipeline's ends, send nothing). ``link_free`` is updated: when each link and
    direction is free again."""
    if block.kind == "W" or block.part != model.last_part:
        return None
    v = model.virtual(stage, block.chunk)
    target = v + 1 if block.kind == "F" else v - 1
    if not 0 <= target < model.stages * model.chunks:
        return None
    s2, c2 = model.place(target)
    waiting = Block(block.kind, block.mb, c2)
    if s2 == stage:
        return s2, waiting, end, "same stage"
    boundary = model.boundary(stage, s2)
    # One queue per link and direction; the loop's wrap-around carries activations "up" too.
    direction = "up" if (s2 > stage) == (abs(s2 - stage) == 1) else "down"
    occupancy, latency = model.link_cost(boundary)
    leave = max(end, link_free.get((boundary, direction), 0.0))
    link_free[(boundary, direction)] = leave + occupancy
    how = (f"message over slow link {boundary} {direction}"
           + (f" (queued {leave - end:g})" if leave > end + 1e-12 else "")
           if occupancy or latency else f"message over link {boundary}")
    return s2, waiting, leave + occupancy + latency, how


def _send(model: PipelineModel, stage: int, block: Block, end: float,
          arrival: dict[tuple[int, Block], tuple[float, str]],
          link_free: dict[tuple[int, str], float]) -> None:
    message = send(model, stage, block, end, link_free)
    if message is not None:
        s2, waiting, at, how = message
        arrival[(s2, waiting)] = (at, how)


def _critical_path(times: dict[tuple[int, Block], tuple[float, float]],
                   why: dict[tuple[int, Block], tuple[str, tuple[int, Block] | None]]
                   ) -> list[Step]:
    """From the last block to end back to time 0, each block's reason to start then."""
    key: tuple[int, Block] | None = max(times, key=lambda k: times[k][1])
    path = []
    while key is not None:
        start, end = times[key]
        how, before = why[key]
        path.append(Step(key[0], key[1], start, end, how if before is not None else "start"))
        if before is None or start <= 0:
            break
        key = before
    return path[::-1]
