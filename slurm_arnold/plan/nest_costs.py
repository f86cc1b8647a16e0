"""NEST's costs on NEST's own solver input (``nest_input``), and the exact search of NEST's
space with them (``arnold plan --nest-input``; docs/plan.md sets the costs out).

The costs follow NEST's program (``device_placement.cpp`` in scai-tech/Nest): a stage's load is
its forward chain plus its backward chain, a stage fits when its parameters, optimizer state,
activations and stash fit, the time per batch is the bottleneck times the micro-batches per
replica plus the fill, plus the first stage's all-reduce on NEST's hierarchical model. The
search is a dynamic program over (stage from the end, first layer of the suffix), then every
first stage and every degree priced in full, in NEST's floating-point order.
"""

from __future__ import annotations

import math
import time
from typing import Any

from slurm_arnold.errors import ArnoldError
from slurm_arnold.plan.nest_input import (
    INFEASIBLE,
    NestGraph,
    NestInstance,
    NestLayout,
    NestPlan,
)


def level_between(inst: NestInstance, dev_a: int, dev_b: int) -> int:
    """The lowest network level whose switch joins two devices (NEST's ``getLoadIdx``); the top
    level when none does (more devices than the levels describe: NEST's program reads out of
    bounds there)."""
    a, b = dev_a, dev_b
    for level, fan in enumerate(inst.devices_per_level):
        a, b = a // fan, b // fan
        if a == b:
            return level
    return inst.levels - 1


def _transfer(inst: NestInstance, nbytes: float, level: int) -> float:
    # NEST: one hop at level 0, up and down (twice) above it.
    if level == 0:
        return nbytes / inst.bws[0] + inst.latency[0]
    return 2 * (nbytes / inst.bws[level] + inst.latency[level])


def stage_load(inst: NestInstance, g: NestGraph, first: int, end: int, fw_level: int,
               bw_level: int, recompute: bool) -> float:
    """One micro-batch's forward plus backward latency of the stage holding positions
    ``first..end-1`` (NEST's ``getLoadOfStageForA``, in its order of operations): transfers
    into the stage at ``fw_level``, out of it at ``bw_level``; with ``recompute`` the backward
    starts after a recomputation chain (NEST prices it with the backward latencies)."""
    finish: dict[int, float] = {}
    fw_pass = 0.0
    for v in range(first, end):
        start = 0.0
        for u, nbytes in g.incoming[v]:
            start = max(start, finish[u] if u in finish else _transfer(inst, nbytes, fw_level))
        finish[v] = start + g.fw[v]
        fw_pass = finish[v]
    if not recompute:
        finish = {}
        bw_pass = 0.0
        for v in range(end - 1, first - 1, -1):
            start = 0.0
            for w, nbytes in g.outgoing[v]:
                start = max(start, finish[w] if w in finish
                            else _transfer(inst, nbytes, bw_level))
            finish[v] = start + g.bw[v]
            bw_pass = finish[v]
        return fw_pass + bw_pass
    finish = {}
    recomputed = 0.0
    for v in range(first, end):
        start = 0.0
        for u, _ in g.incoming[v]:
            if u in finish:
                start = max(start, finish[u])
        finish[v] = start + g.bw[v]
        recomputed = finish[v]
    finish = {}
    entire = 0.0
    for v in range(end - 1, first - 1, -1):
        start = recomputed
        for w, nbytes in g.outgoing[v]:
            start = max(start, finish[w] if w in finish else _transfer(inst, nbytes, bw_level))
        finish[v] = start + g.bw[v]
        entire = finish[v]
    return fw_pass + entire


def stage_params(g: NestGraph, first: int, end: int) -> float:
    """Parameter bytes of the stage (NEST sums them node by node)."""
    total = 0.0
    for v in range(first, end):
        total += g.params[v]
    return total


def max_position(inst: NestInstance, g: NestGraph, first: int, end: int) -> int:
    """The largest ``s`` (the stage's position counted from the last stage, 1 = last) at which
    the stage fits in memory under 1F1B: NEST's ``const + (s - 1) x stash <= memory``; 0 when it
    never fits."""
    params = stage_params(g, first, end)
    optimizer = (2 * params + 2 * params) + 2 * params if inst.adam else 0.0
    activations = 0.0
    for v in range(first, end):
        activations += g.activations[v]
    const = 2 * params + optimizer + activations
    if inst.recompute:
        stash = 0.0
        for v in range(first, end):
            for u, nbytes in g.incoming[v]:
                if not first <= u < end:
                    stash += nbytes
    else:
        stash = activations
    if const + (inst.max_devices - 1) * stash <= inst.max_memory:
        return inst.max_devices
    if const > inst.max_memory:
        return 0
    return 1 + math.floor((inst.max_memory - const) / stash)


def allreduce_cost(inst: NestInstance, dp: int, params: float, spacing: int) -> float:
    """NEST's data-parallel synchronisation of ``params`` bytes over ``dp`` replicas placed
    ``spacing`` devices apart: halving-doubling under the lowest common switch, then the full
    data up and down each level above (``getDataParallelResyncCostTree``)."""
    ids = list(range(0, dp * spacing, spacing))
    top = inst.levels
    lowered = list(ids)
    for level, fan in enumerate(inst.devices_per_level):
        lowered = [i // fan for i in lowered]
        if all(i == lowered[0] for i in lowered):
            top = level + 1
            break
    total = 0.0
    for i in range(int(math.log2(len(ids)))):
        data = params / math.pow(2, i)
        total += inst.latency[0] + (1 / inst.bws_dp[0]) * data
    lower = 0.0
    for level in range(1, top):
        total += (2 * (inst.latency[level] + (1 / inst.bws_dp[level]) * params)) + lower
        lower += total
    return total


def _boundary_levels(inst: NestInstance, stages: int, a: int) -> list[int]:
    """levels[r]: the level between stage r and stage r + 1, stages counted from the last one,
    which sits on devices 0..a-1 (NEST's skeleton places the last stage first)."""
    return [level_between(inst, (r + 1) * a, r * a) for r in range(stages - 1)]


def price(inst: NestInstance, layout: NestLayout) -> tuple[float, float]:
    """(time per batch, bottleneck load) of a layout in NEST's units; ``inf`` when a stage does
    not fit in memory at its position, or the layout needs more devices than the file has."""
    g = inst.graphs[layout.tp]
    a = layout.devices_per_stage
    stages = layout.pp
    if stages * a * layout.dp > inst.max_devices or layout.dp > inst.mbs_in_batch:
        return INFEASIBLE, INFEASIBLE
    levels = _boundary_levels(inst, stages, a)
    bottleneck = 0.0
    for k in range(stages):
        r = stages - 1 - k  # from the last stage
        first, end = layout.cuts[k], layout.cuts[k + 1]
        if max_position(inst, g, first, end) < r + 1:
            return INFEASIBLE, INFEASIBLE
        fw_level = levels[r] if r < stages - 1 else 0
        bw_level = levels[r - 1] if r > 0 else 0
        bottleneck = max(bottleneck, stage_load(inst, g, first, end, fw_level, bw_level,
                                                inst.recompute and r > 0))
    return _time(inst, layout.dp, stages, a, bottleneck,
                 stage_params(g, layout.cuts[0], layout.cuts[1])), bottleneck


def _time(inst: NestInstance, dp: int, stages: int, a: int, bottleneck: float,
          first_params: float) -> float:
    per_pipeline = -(-inst.mbs_in_batch // dp)
    return bottleneck * (per_pipeline + stages - 1) \
        + allreduce_cost(inst, dp, first_params, stages * a)


# ----------------------------------------------------------------------------- the search

def search_nest(inst: NestInstance) -> NestPlan:
    """The layout with the smallest time per batch over NEST's space (every TP width, degree,
    stage count and contiguous cut), priced by :func:`price`."""
    started = time.perf_counter()
    best: tuple[float, float, NestLayout] | None = None
    priced = 0
    for width, g in inst.graphs.items():
        a = width * inst.ep * inst.cp
        max_stages = min(inst.max_devices, g.size, inst.max_devices // a)
        if max_stages < 1:
            continue
        found, count = _search_width(inst, g, width, a, max_stages)
        priced += count
        if found is not None and (best is None or found[0] < best[0]):
            best = found
    if best is None:
        raise ArnoldError("no layout fits in memory on NEST's costs without ZeRO (NEST's "
                          "program would try its ZeRO fallback, priced by its own network "
                          "simulator, which this search does not model)")
    layout = best[2]
    # Report the price in NEST's order of operations (the search compared the same numbers).
    exact, exact_bottleneck = price(inst, layout)
    return NestPlan(layout=layout, time_per_batch=exact, bottleneck=exact_bottleneck,
                    search_seconds=time.perf_counter() - started, layouts_priced=priced)


def _search_width(inst: NestInstance, g: NestGraph, width: int, a: int,
                  max_stages: int) -> tuple[tuple[float, float, NestLayout] | None, int]:
    n = g.size
    levels = _boundary_levels(inst, max_stages, a)
    fits = [[0] * (n + 1) for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n + 1):
            fits[i][j] = max_position(inst, g, i, j)
    loads: dict[tuple[int, int, int, int, bool], float] = {}

    def load(i: int, j: int, r: int, stages: int) -> float:
        fw_level = levels[r] if r < stages - 1 else 0
        bw_level = levels[r - 1] if r > 0 else 0
        # The first stage receives nothing: its forward level never matters.
        if i == 0:
            fw_level = 0
        if j == n:
            bw_level = 0
        key = (i, j, fw_level, bw_level, inst.recompute and r > 0)
        if key not in loads:
            loads[key] = stage_load(inst, g, i, j, fw_level, bw_level, key[4])
        return loads[key]

    # suffix[r][i]: the smallest bottleneck of positions i.. on the last r + 1 stages (the
    # stage holding i is an interior one: its forward level is levels[r]), and its cut.
    suffix: list[list[float]] = []
    cut_at: list[list[int]] = []
    for r in range(max_stages - 1):
        row = [INFEASIBLE] * (n + 1)
        arg = [-1] * (n + 1)
        for i in range(1, n):
            for j in range(i + 1, n + 1):
                if fits[i][j] < r + 1:
                    continue
                tail = 0.0 if (r == 0 and j == n) else (suffix[r - 1][j] if r > 0 else INFEASIBLE)
                if tail == INFEASIBLE:
                    continue
                value = max(load(i, j, r, max_stages), tail)
                if value < row[i]:
                    row[i], arg[i] = value, j
        suffix.append(row)
        cut_at.append(arg)

    best: tuple[float, float, NestLayout] | None = None
    priced = 0
    max_dp = min(inst.max_devices, inst.mbs_in_batch)
    for stages in range(1, max_stages + 1):
        r = stages - 1
        firsts: list[tuple[float, int]] = []
        for e in range(1, n + 1):
            if fits[0][e] < stages:
                continue
            tail = 0.0 if stages == 1 and e == n else (
                suffix[r - 1][e] if stages > 1 and e < n else INFEASIBLE)
            if tail == INFEASIBLE:
                continue
            firsts.append((max(load(0, e, r, stages), tail), e))
        if not firsts:
            continue
        firsts.sort()
        for dp in range(1, min(max_dp, inst.max_devices // (stages * a)) + 1):
            per_pipeline = -(-inst.mbs_in_batch // dp)
            multiplier = per_pipeline + stages - 1
            for bottleneck, e in firsts:
                # The all-reduce only adds: no later first stage can beat the best any more.
                if best is not None and bottleneck * multiplier >= best[0]:
                    break
                total = _time(inst, dp, stages, a, bottleneck, stage_params(g, 0, e))
                priced += 1
                if best is None or total < best[0]:
                    best = (total, bottleneck, NestLayout(width, dp, _cuts(cut_at, e, r, n), a))
    return best, priced


def _cuts(cut_at: list[list[int]], first_end: int, r: int, n: int) -> tuple[int, ...]:
    cuts = [0, first_end]
    position = first_end
    for row in range(r - 1, -1, -1):
        position = cut_at[row][position]
        cuts.append(position)
    if cuts[-1] != n:
        raise AssertionError("cut reconstruction did not end at the last node")
    return tuple(cuts)


def plan_doc(inst: NestInstance, plan: NestPlan) -> dict[str, Any]:
    """The plan as ``arnold plan --nest-input --json`` prints it (NEST's key names where NEST
    has one)."""
    lay = plan.layout
    g = inst.graphs[lay.tp]
    stages = [{"nodes": list(g.ids[lay.cuts[k]:lay.cuts[k + 1]]),
               "devicesForStage": lay.devices_per_stage} for k in range(lay.pp)]
    return {
        "tp": lay.tp, "pp": lay.pp, "dp": lay.dp,
        "ep": inst.ep, "cp": inst.cp,
        "stages": stages,
        "nodes_per_stage": [lay.cuts[k + 1] - lay.cuts[k] for k in range(lay.pp)],
        "finalTimePerBatch": plan.time_per_batch,
        "bottleneck": plan.bottleneck,
        "throughput": inst.mbs_in_batch / plan.time_per_batch,
        "devices_used": lay.pp * lay.devices_per_stage * lay.dp,
        "max_devices": inst.max_devices,
        "tp_widths": sorted(inst.graphs),
        "layouts_priced": plan.layouts_priced,
        "search_seconds": round(plan.search_seconds, 4),
        "units": "NEST's: its estimator's per-layer latency units",
    }
