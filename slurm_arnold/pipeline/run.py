"""One schedule, by name, generated and simulated: what ``arnold pipeline`` and the benchmark
run for each name."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from slurm_arnold.pipeline.greedy import greedy
from slurm_arnold.pipeline.model import PipelineModel
from slurm_arnold.pipeline.schedules import FUSED, STATIC
from slurm_arnold.pipeline.simulate import Result, simulate
from slurm_arnold.pipeline.solver import solve

NAMES = ("1f1b", "i1f1b", "zbh1", "zbh2", "greedy", "optimal")


def run(model: PipelineModel, name: str, *, chunks: int = 2,
        time_limit: float = 60.0) -> tuple[dict[str, Any], Result, PipelineModel]:
    """Generate and simulate one schedule: (its JSON object, the simulation, the model it ran
    on: static schedules run whole blocks on one chunk, ``i1f1b`` on ``chunks`` in a loop)."""
    extra: dict[str, Any] = {}
    used = model if name == "greedy" else replace(model, sub_blocks=1)
    if name == "i1f1b":
        used = replace(used, chunks=chunks, chunk_shape="loop")
    elif name in STATIC:
        used = replace(used, chunks=1)
    limit = model.limit
    if name in STATIC:
        schedule = STATIC[name](used)
    elif name == "greedy":
        schedule = greedy(used, limit)
    else:
        solved = solve(used, greedy(used, limit), limit=limit, time_limit=time_limit)
        schedule = solved.schedule
        extra = {"dual_bound": round(solved.dual_bound, 6), "gap": round(solved.gap, 6),
                 "status": solved.status, "solve_seconds": round(solved.seconds, 3),
                 "warm_start_makespan": round(solved.warm_start, 6)}
    result = simulate(used, schedule, fused_backward=name in FUSED)
    doc = {"schedule": name, **result.summary(),
           "order": [[b.label() for b in stage] for stage in schedule],
           "mem_limit": model.mem_limit if name in STATIC else limit,
           "t_f": list(used.times("F")), "t_b": list(used.times("B")),
           "t_w": list(used.times("W")),
           "critical_path": [step.as_json() for step in result.critical_path], **extra}
    if used.chunks > 1:
        doc["chunks"] = used.chunks
        doc["chunk_shape"] = used.chunk_shape
    if used.sub_blocks > 1:
        doc["sub_blocks"] = used.sub_blocks
    return doc, result, used
